"""An attack's long loops show a bar on a terminal, inside a ``raysim attack`` command only, without changing what
they compute; in a pipe or a library call they print nothing."""

from __future__ import annotations

import io

import torch
from rich.console import Console

from raysim.attacks.progress import showing_progress, steps
from raysim.attacks.smashed import SmashedSettings, invert_smashed


def linear_search(iterations: int):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(6, 4, generator=generator)
    x = torch.rand(2, 1, 2, 2, generator=generator)

    def head(inputs):
        return (inputs.flatten(1) @ weight.T).unsqueeze(1)

    box = (torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    return invert_smashed(head, head(x), (1, 2, 2), box, SmashedSettings(iterations=iterations, lr=0.05, tv=0.0))


def test_on_a_terminal_a_search_shows_its_iterations_and_finds_what_it_finds_without_the_bar(capfd):
    plain = linear_search(30)
    terminal = io.StringIO()
    with showing_progress(Console(file=terminal, force_terminal=True, width=100)):
        shown = linear_search(30)
    assert "feature search: iteration" in terminal.getvalue() and "30/30" in terminal.getvalue()
    assert torch.equal(shown.inputs, plain.inputs) and shown.loss == plain.loss
    assert capfd.readouterr() == ("", "")  # the bar went to its console only, stdout untouched


def test_in_a_pipe_or_outside_an_attack_command_nothing_is_drawn(capfd):
    piped = io.StringIO()
    with showing_progress(Console(file=piped)):
        linear_search(5)
        with steps("anything", 3) as step:
            step()
    linear_search(5)
    assert piped.getvalue() == "" and capfd.readouterr() == ("", "")
