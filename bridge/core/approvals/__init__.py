"""Approvals: which tool calls agy may make, and asking the thread about the rest.

``policy`` decides (no I/O beyond resolving paths); it reads command lines with ``shell`` (a
real bash grammar), matches them against ``rules`` (word lists), consults ``runners`` (the
options and programs that run other code), ``options``/``option_tables`` (the options each
program is known to take: a rule's ``*`` covers only those), ``argv_checks`` (both, and
writes by option judged as writes), ``paths`` (files tools run as configuration) and
``secrets`` (paths whose reads ask; values the scrubber learns). ``hook_watch`` stops an agy
that runs no hooks.
``gate`` runs one thread's requests (ask the chat, wait, store); ``texts`` words the request
and its decision for every chat alike.
"""
