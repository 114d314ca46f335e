"""``equiv diagnose``: a user's llama.cpp command line (or two: baseline and speculative), what
in it can change output, the equiv run it maps to, and the verdict of that run in plain words.

- `command`: the command line parsed (`parse_command`, `split_commands`);
- `findings`: what the command line alone says (`findings`);
- `mapping`: the equiv run it maps to, the user's own llama-server when there is one, and the
  ``equiv run`` command that reruns it (`map_to_run`, `run_command`);
- `deployments`: two deployments that may differ, as one run (`map_pair`);
- `run`: the diagnosis run (`execute`); `verdict`: its verdict worded (`verdict_lines`).
"""
