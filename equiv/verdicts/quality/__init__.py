"""Task quality: graders, the sandbox they run in, pass rates and the paired statistics."""
