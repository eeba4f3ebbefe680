"""Forges (GitHub, GitLab): pull requests, their checks and merges, behind one neutral Protocol.

Nothing here knows a chat platform or agy; ``bridge/core`` joins a thread to its pull request.
"""
