// The live part of a thread's page: the running turn's text and tool calls as they stream
// (Server-Sent Events); the page is read again when a turn begins or ends, or a request or a
// message changes. Without JavaScript the page shows the same, as of when it was loaded.
(function () {
  "use strict";
  var box = document.getElementById("live");
  if (!box || !window.EventSource) {
    return;
  }
  var text = document.getElementById("live-text");
  var tools = document.getElementById("live-tools");
  var source = new EventSource(box.getAttribute("data-events"));
  // Whether this page was rendered with a turn running here: the stream opens with the turn
  // so far ("snapshot") or "idle", and a page that shows the other state is read again (the
  // turn began or ended between the page's rendering and the stream's opening).
  var rendered = !document.getElementById("no-turn");
  function reload() {
    source.close();
    window.location.reload();
  }
  source.addEventListener("idle", function () {
    if (rendered) {
      reload();
    }
  });
  var shown = {};
  function toolLine(tool) {
    // A tool's later state replaces its line (as the server's snapshot does).
    var key = tool.name + "\u0000" + tool.summary;
    var item = shown[key] || document.createElement("li");
    shown[key] = item;
    item.className = "tool tool-" + String(tool.state).toLowerCase();
    item.textContent = tool.state + " " + tool.name + " " + tool.summary;
    return item;
  }
  source.addEventListener("snapshot", function (e) {
    if (!rendered) {
      reload();
      return;
    }
    var turn = JSON.parse(e.data);
    text.textContent = turn.text;
    while (tools.firstChild) {
      tools.removeChild(tools.firstChild);
    }
    shown = {};
    turn.tools.forEach(function (tool) {
      tools.appendChild(toolLine(tool));
    });
  });
  source.addEventListener("delta", function (e) {
    text.textContent += JSON.parse(e.data).text;
  });
  source.addEventListener("tool", function (e) {
    tools.appendChild(toolLine(JSON.parse(e.data)));
  });
  ["turn", "end", "approval", "mark"].forEach(function (kind) {
    source.addEventListener(kind, function () {
      source.close();
      window.location.reload();
    });
  });
})();
