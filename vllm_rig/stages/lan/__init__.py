"""LAN stage: nginx from the distribution in front of the server (the key on every path, TLS, client networks)."""
