"""The core: plain records, numbers, errors and the small shared services every other
room uses (side files, paths, logs, progress, credentials, the shared vocabulary and the
hub helpers). It imports nothing of madara outside itself."""
