"""threads: AI-agent runs that survive crashes."""
