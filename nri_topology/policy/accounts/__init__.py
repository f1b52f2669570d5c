"""Accounts: what is granted and what is left, CPUs (the ledger), memory, the reservation."""
