"""Pure domain logic: states, transitions, retry policy, ids, codec. No I/O is imported here."""
