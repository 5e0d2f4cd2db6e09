"""``trainsim`` subcommands provided by the profiler (registered via ``trainsim.commands``)."""
