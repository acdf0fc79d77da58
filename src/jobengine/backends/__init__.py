"""Store backends. Only engine.py and the CLI choose one; nothing else imports this package."""
