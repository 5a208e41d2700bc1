"""Hooks: `spillvault hook <client>` gates a coding agent's built-in tools.

One module per client, each with the same shape (`client.HookClient`): where
its configuration lives, how an entry of ours is added and removed, and how
an event is answered. `entry` is the hot path every tool call runs.
"""
