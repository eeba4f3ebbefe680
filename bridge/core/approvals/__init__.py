"""Approvals: which tool calls agy may make, and asking the thread about the rest.

``policy`` decides (no I/O beyond resolving paths); it reads command lines with ``shell`` (a
real bash grammar), matches them against ``rules`` (word lists), consults ``runners`` (the
options and programs that run other code) and ``paths`` (files tools run as configuration).
``gate`` runs one thread's requests (ask the chat, wait, store); ``texts`` words the request
and its decision for every chat alike.
"""
