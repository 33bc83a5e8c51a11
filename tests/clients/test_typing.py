"""Users' type checkers accept the client's documented forms, and catch what is misspelt.

mypy --strict checks a user's program (`typing_user_program.py`: the README's forms)
and a few mistakes, in one run, as it would in a project that imports trunkline."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from mypy import api

HERE = Path(__file__).resolve().parent

MISTAKES = textwrap.dedent(
    """\
    from trunkline import Client, Tool


    def lookup(query: str) -> str:
        return query


    misspelt = Tool(name="lookup", exeucte=lookup)
    not_seconds = Tool(name="lookup", execute=lookup, timeout_s="soon")


    async def ask(client: Client) -> None:
        await client.complete("mock:echo", "hi", temprature=0.5)
    """
)


def test_the_documented_forms_type_check_and_mistakes_do_not(tmp_path: Path) -> None:
    mistakes = tmp_path / "mistakes.py"
    mistakes.write_text(MISTAKES)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")  # a user's project: none of this repository's settings
    stdout, stderr, status = api.run(
        [
            "--strict",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--show-error-codes",
            str(HERE / "typing_user_program.py"),
            str(mistakes),
        ]
    )
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    program = [line for line in errors if "typing_user_program.py" in line]
    assert program == [], "\n".join(program)
    found = sorted(
        (int(m.group(1)), m.group(2)) for e in errors if (m := re.search(r":(\d+): error: .*\[([\w-]+)\]$", e))
    )
    assert found == [(8, "call-arg"), (9, "arg-type"), (13, "call-arg")], stdout + stderr
    assert status == 1
    assert '"exeucte"' in stdout and 'did you mean "execute"' in stdout
    assert '"temprature"' in stdout and 'did you mean "temperature"' in stdout
