"""A run's curves and the compare page: `series` builds a chart's arrays from the column blocks of
`blocks` (and the rows they do not cover yet); `compare`, `compare_groups` and `aggregates` draw runs
against runs (seed groups with bands, IQM); `sources` names the sets of runs the compare page opens on;
`views` is the compare page."""
