// A person verifying the bot from an independent client: matrix-js-sdk with its Rust crypto.
//
// Environment: HS (homeserver URL), USER_ID, PASSWORD, BOT (the bot's user id), MODE ("room"
// or "to-device"). Logs in, sets up cross-signing, creates an encrypted DM with the bot, waits
// for it to join, requests verification in the DM (as Element's "Verify" on a person does) or
// to the bot's device (as "Verify session" does), starts SAS, prints the emoji it shows
// and confirms them (the person saw the same as the operator), and waits until the
// verification is done. One JSON object per line on stdout: {"event": "room" | "sas" |
// "done" | "status" | "error", ...}.

import { pathToFileURL } from "node:url";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// Node 20 lacks Promise.withResolvers (the Rust crypto's wasm glue uses it).
if (!Promise.withResolvers) {
  Promise.withResolvers = function () {
    let resolve, reject;
    const promise = new Promise((res, rej) => { resolve = res; reject = rej; });
    return { promise, resolve, reject };
  };
}

const here = dirname(fileURLToPath(import.meta.url));
const root = process.env.JS_SDK_DIR || here;
const lib = (p) => import(pathToFileURL(join(root, "node_modules", "matrix-js-sdk", "lib", p)).href);
const sdk = await lib("index.js");
const { VerificationPhase, VerificationRequestEvent, VerifierEvent } = await lib("crypto-api/index.js");

const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const { HS, USER_ID, PASSWORD, BOT } = process.env;
const silent = { debug() {}, info() {}, log() {}, warn() {}, error() {}, trace() {}, getChild() { return silent; } };

function until(emitter, event, check, ms = 60000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${event}`)), ms);
    const listener = (...args) => {
      const value = check(...args);
      if (value) { clearTimeout(timer); emitter.off(event, listener); resolve(value); }
    };
    emitter.on(event, listener);
  });
}

try {
  const anon = sdk.createClient({ baseUrl: HS, logger: silent });
  const login = await anon.loginRequest({
    type: "m.login.password",
    identifier: { type: "m.id.user", user: USER_ID },
    password: PASSWORD,
    initial_device_display_name: "js-sdk test client",
  });
  const client = sdk.createClient({
    baseUrl: HS, userId: login.user_id, deviceId: login.device_id,
    accessToken: login.access_token, logger: silent,
  });
  await client.initRustCrypto({ useIndexedDB: false });
  const crypto = client.getCrypto();
  await crypto.bootstrapCrossSigning({
    setupNewCrossSigning: true,
    authUploadDeviceSigningKeys: async (makeRequest) => {
      await makeRequest({
        type: "m.login.password",
        identifier: { type: "m.id.user", user: USER_ID },
        password: PASSWORD,
      });
    },
  });
  const prepared = until(client, "sync", (state) => state === "PREPARED");
  await client.startClient({ initialSyncLimit: 20 });
  await prepared;

  const { room_id: roomId } = await client.createRoom({
    invite: [BOT], is_direct: true, preset: "trusted_private_chat",
    initial_state: [{ type: "m.room.encryption", state_key: "", content: { algorithm: "m.megolm.v1.aes-sha2" } }],
  });
  say({ event: "room", room_id: roomId, device_id: login.device_id });
  const joined = () => client.getRoom(roomId)?.getMember(BOT)?.membership === "join";
  if (!joined()) {
    await until(client, "RoomMember.membership", (ev, member) => member.roomId === roomId && member.userId === BOT && member.membership === "join");
  }

  let request;
  if (process.env.MODE === "to-device") {
    // As Element's "Verify session" on the bot's device: to-device, to that one device.
    const devices = (await crypto.getUserDeviceInfo([BOT], true)).get(BOT);
    const [botDevice] = [...devices.keys()];
    request = await crypto.requestDeviceVerification(BOT, botDevice);
  } else {
    request = await crypto.requestVerificationDM(BOT, roomId);
  }
  say({ event: "requested", to_device: !request.roomId, transaction_id: request.transactionId ?? null });
  if (request.phase !== VerificationPhase.Ready) {
    await until(request, VerificationRequestEvent.Change, () => request.phase === VerificationPhase.Ready || request.phase === VerificationPhase.Cancelled);
  }
  if (request.phase !== VerificationPhase.Ready) throw new Error("the bot did not accept the request");
  const verifier = await request.startVerification("m.sas.v1");
  verifier.on(VerifierEvent.ShowSas, (sas) => {
    say({ event: "sas", emoji: sas.sas.emoji.map((e) => e[0]) });
    sas.confirm();
  });
  await verifier.verify();
  say({ event: "done" });
  // The client signs the bot's identity with its own user-signing key right after "done".
  let status = await crypto.getUserVerificationStatus(BOT);
  for (let i = 0; i < 50 && !status.isCrossSigningVerified(); i++) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    status = await crypto.getUserVerificationStatus(BOT);
  }
  say({ event: "status", cross_signing_verified: status.isCrossSigningVerified(), verified: status.isVerified() });
  client.stopClient();
  process.exit(0);
} catch (error) {
  say({ event: "error", message: String(error && error.stack || error) });
  process.exit(1);
}
