"""The operator console in the browser (docs/console.md): server-rendered pages of what the
core and the store hold, live turns over Server-Sent Events, and actions through the same
paths as the chat's. It talks to the core through neutral types only."""
