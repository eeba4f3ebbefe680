"""One thread: the commands it takes, its pure state machine, and the actor that runs it."""
