"""Sandbox helpers shared by backends: path confinement, workspace change detection, and the OS
sandbox of shell commands (`confine`: Landlock, bubblewrap, Seatbelt)."""
