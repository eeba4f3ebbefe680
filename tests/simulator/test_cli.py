from __future__ import annotations

from tests.simulator.driver import SimFactory

ADVERTISED = (
    "-p, --print",
    "--input-format",
    "--output-format",
    "--add-dir",
    "--model",
    "--effort",
    "--mode",
    "--conversation",
    "--continue",
    "--print-timeout",
    "--sandbox",
    "--dangerously-skip-permissions",
    "--disable-slash-commands",
    "--agent",
)


def test_help_lists_agys_flags(sims: SimFactory) -> None:
    done = sims.run("--help")
    assert done.returncode == 0
    for flag in ADVERTISED:
        assert flag in done.stdout


def test_help_omit_hides_flags_and_rejects_them(sims: SimFactory) -> None:
    omit = {"AGY_SIM_HELP_OMIT": "--print-timeout,--sandbox"}
    done = sims.run("--help", **omit)
    assert "--print-timeout" not in done.stdout and "--sandbox" not in done.stdout
    assert "--model" in done.stdout
    rejected = sims.run(
        "--input-format", "stream-json", "--output-format", "stream-json", "--sandbox", **omit
    )
    assert rejected.returncode == 1
    assert rejected.stderr.strip() == "error: unknown flag: --sandbox"
    assert rejected.stdout == ""


def test_version(sims: SimFactory) -> None:
    done = sims.run("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("agy ") and "simulator" in done.stdout


def test_models_lists_models(sims: SimFactory) -> None:
    done = sims.run("models")
    assert done.returncode == 0
    assert "gemini-3.8-flash-low" in done.stdout.split()


def test_models_signed_out(sims: SimFactory) -> None:
    done = sims.run("models", AGY_SIM_SIGNED_OUT="1")
    assert done.returncode == 1
    assert "Please sign in" in done.stderr
    assert done.stdout == ""


def test_unknown_flag_exits_1(sims: SimFactory) -> None:
    done = sims.run("--input-format", "stream-json", "--frobnicate")
    assert (done.returncode, done.stderr.strip()) == (1, "error: unknown flag: --frobnicate")


def test_without_print_the_interactive_ui_refuses_a_pipe(sims: SimFactory) -> None:
    done = sims.run("--input-format", "stream-json", "--output-format", "stream-json")
    assert done.returncode == 1
    assert "--print" in done.stderr and done.stdout == ""


def test_a_driver_mode_build_runs_without_print(sims: SimFactory) -> None:
    sim = sims.start(
        "--input-format", "stream-json", "--output-format", "stream-json",
        stream=False, AGY_SIM_DRIVER_MODE="1",
    )  # fmt: skip
    assert sim.next_event()["event"] == "init"
    sim.send("[[reply hi]]")
    assert sim.turn()[-1]["result"]["response"] == "hi\n"


def test_modes_other_than_stream_json_exit_2(sims: SimFactory) -> None:
    done = sims.run("-p", "hello")
    assert done.returncode == 2
    assert "stream-json" in done.stderr
