"""A run is launched: the launch form (`forms.RunLaunchForm`, one field per RunConfig field), what a new
run starts from (`defaults`), the launch limits (`limits.limits_check_launch`), the catalog of programs
and tasks (`catalog`), the models offered (`model_offer`), links that carry settings (`config_link`) and
the summary of a refused form (`error_summary`). It knows runs only through the models and selectors."""
