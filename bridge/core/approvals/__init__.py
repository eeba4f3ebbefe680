"""Approvals: which tool calls agy may make, and asking the thread about the rest.

``policy`` decides without any I/O; ``gate`` runs one thread's requests (ask the chat, wait,
store); ``texts`` words the request and its decision for every chat alike.
"""
