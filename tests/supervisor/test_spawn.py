"""What a worker process inherits."""

from __future__ import annotations

from trunkline.supervisor.launch import worker_environment


def test_a_worker_inherits_only_its_own_key():
    base = {
        "PATH": "/usr/bin",
        "HOME": "/h",
        "HTTPS_PROXY": "http://p:3128",
        "TRUNKLINE_TRACE_HOPS": "1",
        "ANTHROPIC_API_KEY": "sk-ant",
        "OPENROUTER_API_KEY": "sk-or",
        "MY_LAB_KEY": "lab",
        "TRUNKLINE_TOKEN": "tok",
        "GITHUB_TOKEN": "gh",
        "AWS_SECRET_ACCESS_KEY": "aws",
    }
    env = worker_environment(base, ["ANTHROPIC_API_KEY"], other_keys={"OPENROUTER_API_KEY", "MY_LAB_KEY"})
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/h",
        "HTTPS_PROXY": "http://p:3128",
        "TRUNKLINE_TRACE_HOPS": "1",
        "ANTHROPIC_API_KEY": "sk-ant",
    }
    lab = worker_environment(base, ["MY_LAB_KEY"], other_keys={"OPENROUTER_API_KEY", "ANTHROPIC_API_KEY"})
    assert lab["MY_LAB_KEY"] == "lab" and "ANTHROPIC_API_KEY" not in lab and "TRUNKLINE_TOKEN" not in lab
    assert "ANTHROPIC_API_KEY" not in worker_environment(base, [])  # the mock needs no key at all
