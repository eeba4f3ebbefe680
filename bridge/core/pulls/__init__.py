"""A worktree thread's pull request (docs/pull-requests.md): the diff, the bridge-side push, the
PR on the forge, its checks followed back into the thread, the merge. The forge itself is
:mod:`bridge.forge`'s; this package joins it to threads."""
