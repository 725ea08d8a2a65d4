"""The launch form's sweep inputs (templates/runs/new.html, when the Sweep button is offered):
`{% sweep_entry form field %}` beside each sweepable field, `{% sweep_settings form %}` above the buttons.

A launch page shown again (400) keeps what was typed: the entries from the posted data, the settings
from the form the Sweep button checked (`form.sweep_settings`, with its errors), else from the data."""

from django import template

from webapp.sweeps.forms import ENTRY_PREFIX, SweepSettingsForm, entry_placeholder, posted_space, sweepable

register = template.Library()


@register.inclusion_tag("sweeps/_launch_entry.html")
def sweep_entry(form, field):
    """The field's "sweep" toggle and its entry (nothing for a field a sweep cannot vary)."""
    if not sweepable(field.name):
        return {"shown": False}
    value = str(form.data.get(ENTRY_PREFIX + field.name, "")) if form.is_bound else ""
    return {"shown": True, "name": field.name, "input_name": ENTRY_PREFIX + field.name, "value": value,
            "on": bool(value.strip()), "placeholder": entry_placeholder(field.name)}


@register.inclusion_tag("sweeps/_launch_settings.html")
def sweep_settings(form):
    """The sweep's settings fieldset: open when something is swept or a setting has an error."""
    settings = getattr(form, "sweep_settings", None)
    if settings is None:
        posted = {name: form.data[name] for name in SweepSettingsForm.base_fields if form.is_bound and name in form.data}
        settings = SweepSettingsForm(initial=posted)
    swept = bool(form.is_bound and posted_space(form.data))
    return {"settings": settings, "open": swept or bool(settings.is_bound and settings.errors)}
