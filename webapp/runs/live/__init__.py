"""The run page's live half on the server: `notices` are the typed messages a run's websocket group
hears (steps, status, prompts, alerts), `consumers` the websocket that relays them to one page, and
`routing` its URL."""
