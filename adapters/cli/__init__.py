"""The `spillvault` command and its demo: the outermost layer.

May import anything of ours; nothing of ours imports it.
"""
