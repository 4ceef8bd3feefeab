"""The chat page (chat_page: true): Open WebUI in its own venv and unit, served by the box's nginx."""
