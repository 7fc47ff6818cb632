"""What a run needs around its flow, under both of its doors (the `judgebench` command, cli/, and
`evaluate()`, api/): the Prefect server it reports to (`prefect_server`), the watch that ends it when that
server is lost (`server_watch`), a quiet Prefect (`quiet`, `logging.yml`), the judgments counted for a
progress display (`progress`), and the run path itself (`run`): settings -> checks -> server -> flow ->
`RunResults`, written once. Nothing here draws on a terminal: each door shows a run its own way."""
