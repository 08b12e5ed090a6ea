"""The persistent store as the server uses it: writer, group commit, cleanup."""
