"""The run options: one table shared by ``equiv run``, the pytest plugin and TOML configs.

- `equiv.options.option`: one `Option`, and `OptionValues`, the values of options;
- `equiv.options.table`: every `Option` (``RUN_OPTIONS``: the core ones, then those the engines
  declare, gathered by `run_options`; ``PLUGIN_OPTIONS``), its converter, and the argparse
  arguments made from them (`add_arguments`);
- `equiv.options.config_file`: option values merged from the command line, a TOML config file
  and the defaults (`merge_toml`);
- `equiv.options.build`: a `RunConfig` from merged values (`build_config`), with the engine's
  options (`engine_options`) and the speculative path's overrides (`spec_overrides`).
"""
