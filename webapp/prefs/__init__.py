"""Per-user preferences of the dashboard (chart legend choices, smoothing, axes), stored server-side
so they follow a user across browsers and machines."""
