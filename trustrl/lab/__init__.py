"""The PPO lab: a graded exercise folder (``trustrl lab init``), its grader (``trustrl lab
check``) and the reference solutions (``trustrl lab solution``), which are thin wrappers around
trustrl's own losses, diagnostics and PPO update.

The folder's files live in ``template/`` and are copied as they are; ``solutions.py`` holds the
reference implementation with the lab's signatures; ``commands.py`` the command line.
"""

from __future__ import annotations

TASKS: dict[int, str] = {
    1: "clipped surrogate loss",
    2: "approx KL and clip fraction",
    3: "value loss (plain and clipped)",
    4: "the PPO update",
}
"""Task number -> short title (the scoreboard's rows)."""

__all__ = ["TASKS"]
