"""Developer tools: the local Feishu emulator and the scripted ACP agent used by `demo` and
integration tests. Nothing here is imported by the production code paths."""
