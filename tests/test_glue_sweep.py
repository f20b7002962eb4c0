"""scripts/glue_sweep.py (the fine-tuned protocol) on the CPU with tiny members and slices of real data: each run
chooses its epoch on the held-out slice and stores its predictions, the report adds the ensemble of the separately
tuned members and the comparisons, `--models_dir` keeps each chosen epoch's model, and a second call resumes without
redoing finished runs."""

import json
import os
import re

import numpy as np
import pytest

from hf_multiencoder.models.precision_multiencoder import cpu_model

SCRIPT = "scripts/glue_sweep.py"


def sweep_args(tiny_paths, shared_data, tmp_path, *extra) -> list[str]:
    return [str(a) for a in ("--tasks", "cola", "wnut17", "--rows", "MiniLM", "MPNet", "dme", "MPNet_dme",
                             "plain_MiniLM", "plain_MPNet", "--seeds", 1, 2, "--workers", 2, "--data_dir", shared_data,
                             "--member", f"MiniLM={tiny_paths[0]}", "--member", f"MPNet={tiny_paths[1]}", "--runs_dir",
                             tmp_path / "runs", "--results", tmp_path / "results", "--max_samples", 48,
                             "--max_seq_length", 48, "--bootstrap", 20, "--checkpoints_dir", tmp_path / "checkpoints",
                             *extra)]


@pytest.fixture
def sweep(tiny_paths, shared_data, tmp_path, script_main, capsys, monkeypatch):
    """`sweep(*extra)`: the sweep's main() in this process (its runs are still processes of their own, one thread
    each, offline); returns what it printed."""
    for name, value in (("OMP_NUM_THREADS", "1"), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1")):
        monkeypatch.setenv(name, value)
    main = script_main(SCRIPT)

    def run(*extra) -> str:
        capsys.readouterr()
        main(sweep_args(tiny_paths, shared_data, tmp_path, *extra))
        return capsys.readouterr().out

    return run


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_sweep_chooses_on_the_heldout_slice_reports_baselines_and_resumes(tiny_paths, shared_data, tmp_path, sweep,
                                                                         kill_after_first_checkpoint):
    out = sweep("--models_dir", tmp_path / "models")
    # plain transformers runs each member once (first seed), NER through AutoModelForTokenClassification
    assert out.count(": ok in ") == 4 * 2 * 2 + 2 * 2, out
    report = json.loads((tmp_path / "results" / "glue_finetuned.json").read_text())
    assert report["protocol"]["heldout_fraction"] == 0.1 and report["protocol"]["max_samples"] == 48
    tasks = report["tasks"]
    assert set(tasks) == {"cola", "wnut17"}
    for task, rep in tasks.items():
        rows = rep["rows"]
        assert set(rows) == {"MiniLM", "MPNet", "dme", "MPNet_dme", "ensemble", "plain_MiniLM", "plain_MPNet",
                             "plain_ensemble"}
        for name in ("MiniLM", "MPNet", "dme"):
            run = json.loads((tmp_path / "runs" / task / name / "seed_1" / "result.json").read_text())
            held = [e["heldout"] for e in run["epochs"]]
            chosen = 1 + int(np.argmax(held))
            assert rows[name]["chosen_epochs"][0] == chosen
            # the reported score is the dev score at the epoch chosen on the held-out slice, not the best dev epoch
            assert rows[name]["dev"]["scores"][0] == pytest.approx(100 * run["epochs"][chosen - 1]["dev"])
            assert rows[name]["best_dev_epoch"]["scores"][0] == pytest.approx(100 * max(e["dev"] for e in
                                                                                      run["epochs"]))
            assert run["sizes"]["heldout"] == run["sizes"]["train"] == 48
            folder = tmp_path / "runs" / task / name / "seed_1"
            assert sorted(p.name for p in folder.iterdir()) == ["log.txt", "predictions.npz", "result.json"]
            with np.load(folder / "predictions.npz") as stored:
                assert stored[f"dev_outputs_{chosen}"].dtype == np.float32
                assert not any(k.startswith("dev_outputs_") and k != f"dev_outputs_{chosen}" for k in stored)
        weights = rows["dme"]["fusion_weights"]
        assert set(weights) == {"MiniLM", "MPNet"} and abs(sum(weights.values()) - 1) < 1e-4  # a float32 softmax
        assert rows["ensemble"]["seeds"] == [1, 2] and rows["plain_ensemble"]["seeds"] == [1]
        comp = rep["comparison"]
        assert comp["fused"] == "dme"

        def best(*kinds):  # the strongest row of these kinds by its held-out score
            return max((r for r in rows if rows[r]["kind"] in kinds), key=lambda r: rows[r]["heldout"]["mean"])

        # members tuned through plain transformers count as members, their ensemble as an ensemble; MPNet under the
        # fused rows' head (a control) counts as a baseline
        assert comp["vs_best_member"]["against"] == best("member", "plain")
        assert comp["vs_ensemble"]["against"] == best("ensemble")
        assert comp["best_baseline"] == best("member", "plain", "ensemble", "baseline", "control")
        vs_member = comp["vs_best_member"]  # on the seeds both rows ran (plain rows run the first only)
        assert vs_member["n_seeds"] == len(rows[vs_member["against"]]["seeds"]) == len(vs_member["per_seed"])
        boot = comp["bootstrap_vs_best_baseline"]
        assert boot["low"] <= boot["high"] and boot["n_resamples"] == 20
    assert "fusion_examples" in tasks["cola"]["rows"]["dme"]  # the seed's sentences with their weights
    md = (tmp_path / "results" / "glue_finetuned.md").read_text()
    assert "## cola (MCC)" in md and "## wnut17" in md and "not a result" in md
    # the suite switches the fast path off (conftest.py); each run records the CPU it ran on
    assert re.search(rf"Runs on: cpu: {re.escape(cpu_model())}, \d+ threads \(fp32\)\.", md)

    assert_kept_model_predicts_as_its_chosen_epoch(tmp_path, shared_data)

    assert not any((tmp_path / "checkpoints").rglob("checkpoint-*"))  # finished runs leave no checkpoint

    # a run cut off (no result.json) resumes from its last finished epoch; finished runs are skipped
    assert "Partial" not in md
    seed_2 = tmp_path / "runs" / "cola" / "dme" / "seed_2"
    whole = json.loads((seed_2 / "result.json").read_text())
    assert whole["resumed_after_epochs"] == 0 and len(whole["epochs"]) == 3
    os.remove(seed_2 / "result.json")
    sweep("--report_only")  # what has finished, said to be partial
    partial = (tmp_path / "results" / "glue_finetuned.md").read_text()
    assert "**Partial: 19 of the 20 runs" in partial
    assert re.search(r"the rest is about \d+\.\d hours of training\.", partial)  # priced at cola/dme's seed 1
    kill_after_first_checkpoint(SCRIPT, sweep_args(tiny_paths, shared_data, tmp_path),
                                tmp_path / "checkpoints" / "cola" / "dme" / "seed_2")
    assert not (seed_2 / "result.json").exists(), "the run finished before it could be cut"
    again = sweep()
    assert again.count(": ok in ") == 1 and again.count("skip ") == 19, again
    assert "cola/dme/seed 2: ok" in again and "Resuming from" in (seed_2 / "log.txt").read_text()
    resumed = json.loads((seed_2 / "result.json").read_text())
    assert resumed["resumed_after_epochs"] >= 1 and len(resumed["epochs"]) == 3
    for a, b in zip(resumed["epochs"], whole["epochs"]):  # as if it had never stopped
        assert a["heldout"] == pytest.approx(b["heldout"], abs=1e-5) and a["dev"] == pytest.approx(b["dev"], abs=1e-5)
    assert not (tmp_path / "checkpoints" / "cola" / "dme" / "seed_2").exists()  # finished: its checkpoints are gone


def test_sweep_refuses_unknown_members_and_tasks(tmp_path, script_main, capsys):
    main = script_main(SCRIPT)
    with pytest.raises(SystemExit) as exit_:
        main(["--member", "BERT=/x", "--report_only", "--runs_dir", str(tmp_path)])
    assert exit_.value.code != 0
    assert "--member takes NAME=PATH with NAME one of MiniLM, MPNet" in capsys.readouterr().err
    with pytest.raises(ValueError, match="colaa"):
        main(["--tasks", "colaa", "--report_only", "--runs_dir", str(tmp_path)])


def test_a_task_alias_runs_and_reports_as_its_task(tmp_path, script_main, monkeypatch):
    """`--tasks wnut_17` is WNUT-17: its runs go to `wnut17/`, are scored on its test set and join the head-rate rows,
    not a second task that splits the seeds and reports on the wrong split."""
    import sys

    main = script_main(SCRIPT)
    tasks = []
    monkeypatch.setattr(sys.modules["script_glue_sweep"], "write_report", lambda args: tasks.append(args.tasks))
    main(["--tasks", "WNUT_17", "cola", "--report_only", "--runs_dir", str(tmp_path)])
    assert tasks == [["wnut17", "cola"]]


def test_partial_report_prices_the_runs_left_at_the_measured_rates(script_main):
    """A missing run costs its row's measured mean on its task; a row not run there yet, the per-epoch mean of the
    task's rows with the same members times its epochs; a task with no run of the members is counted, not priced."""
    import sys

    script_main(SCRIPT)
    remaining_hours = sys.modules["script_glue_sweep"].remaining_hours
    reports = {"cola": {"rows": {"MPNet": {"train_seconds": 4800.0}, "MPNet_dme": {"train_seconds": 6000.0},
                                 "dme": {"train_seconds": 7200.0}, "ensemble": {}}}}
    missing = [("cola", "dme", 2),  # its own row: 2 h
               ("cola", "MPNet_4ep", 1),  # MPNet's rows average 0.5 h an epoch: 2 h for 4
               ("cola", "concat", 1),  # the pair's rows: 2 h
               ("stsb", "MPNet", 1), ("cola", "MiniLM", 1)]  # no run of these members on the task
    hours, unmeasured = remaining_hours(reports, missing)
    assert hours == pytest.approx(6.0) and unmeasured == 2


def test_every_ensemble_averages_rows_that_run_on_the_same_tasks_and_seeds(script_main):
    """An ensemble is computed wherever all its members ran: members that run on different tasks or seeds (or a
    misspelt member) would leave it silently missing from the report."""
    import sys

    script_main(SCRIPT)
    sweep = sys.modules["script_glue_sweep"]
    for name, (members, _) in sweep.ENSEMBLES.items():
        assert set(members) <= set(sweep.ROWS), name
        specs = [sweep.ROWS[m] for m in members]
        assert len({(s.tasks, s.seeds, s.epochs) for s in specs}) == 1, name
        assert len({s.members for s in specs}) == len(members), name  # one member each, different ones


def test_comparison_with_levers_puts_the_pairs_rates_through_the_same_selection_as_the_baselines(script_main):
    """The protocol's comparison takes the best fused row at the shared rate; beside it, the levers compete too (the
    pair's rates chosen on the held-out slice), against members whose rates are chosen there too."""
    import sys

    from hf_multiencoder.data.tasks import get_task

    script_main(SCRIPT)
    compare, comparisons = sys.modules["script_glue_sweep"].compare, sys.modules["script_glue_sweep"].COMPARISONS
    labels = np.array([0, 1, 0, 1])
    right = {"dme_head_lr": 4, "MPNet_head_lr": 3, "MPNet": 2, "dme": 2, "ensemble": 1}  # dev examples right
    kinds = {"dme_head_lr": "lever", "MPNet_head_lr": "control", "MPNet": "member", "dme": "fused",
             "ensemble": "ensemble"}
    heldout = {"dme_head_lr": 70, "MPNet_head_lr": 68, "MPNet": 65, "dme": 60, "ensemble": 62}
    table = {r: {"kind": kinds[r], "heldout": {"mean": heldout[r]}, "complete": True} for r in kinds}
    outputs = {r: {1: np.eye(2)[np.where(np.arange(4) < n, labels, 1 - labels)]} for r, n in right.items()}
    dev = {"labels": labels, "lengths": None}
    spec = get_task("rte")

    primary = compare(spec, table, outputs, dev, *comparisons["comparison"], bootstrap=0)
    assert primary["fused"] == "dme" and primary["vs_best_baseline"]["per_seed"] == [pytest.approx(-25.0)]
    levers = compare(spec, table, outputs, dev, *comparisons["comparison_with_levers"], bootstrap=10)
    assert levers["fused"] == "dme_head_lr" and levers["best_baseline"] == "MPNet_head_lr"
    assert primary["vs_best_member"]["against"] == "MPNet"  # members at the protocol's settings
    # the members' rates chosen on the slice too: MPNet with its head at 1e-3 is then the best member
    assert levers["vs_best_member"]["against"] == "MPNet_head_lr" and levers["vs_best_member"]["per_seed"] == [25.0]
    assert levers["vs_ensemble"]["per_seed"] == [75.0] and levers["vs_best_baseline"]["per_seed"] == [25.0]
    assert levers["bootstrap_vs_best_baseline"]["n_resamples"] == 10
    no_member = {"dme": table["dme"]}
    assert compare(spec, no_member, outputs, dev, *comparisons["comparison"], bootstrap=0) is None


def test_a_row_missing_planned_seeds_is_not_chosen_over_rows_that_have_all_theirs(script_main):
    """While the study is partial, a row's held-out mean over one seed does not displace a row's mean over its
    three; it is chosen only where no row of its kinds has finished. A row planned for one seed is complete with it."""
    import sys
    from types import SimpleNamespace

    script_main(SCRIPT)
    sweep = sys.modules["script_glue_sweep"]
    table = {"dme": {"kind": "fused", "heldout": {"mean": 87.65}, "complete": True},
             "cdme": {"kind": "fused", "heldout": {"mean": 87.68}, "complete": False},
             "MPNet": {"kind": "member", "heldout": {"mean": 86.8}, "complete": True}}
    assert sweep.best_row(table, ("fused",)) == "dme"
    table["dme"]["complete"] = False
    assert sweep.best_row(table, ("fused",)) == "cdme"  # none finished: the best of what ran
    args = SimpleNamespace(seeds=[1, 2, 3])
    assert sweep.planned_seeds(args, "plain_MPNet", "mrpc") == [1]
    assert sweep.planned_seeds(args, "cdme", "mrpc") == [1, 2, 3]
    assert sweep.planned_seeds(args, "dme_head_lr", "mrpc") == []  # a lever not planned on MRPC


def assert_kept_model_predicts_as_its_chosen_epoch(tmp_path, shared_data):
    """--models_dir saves the epoch chosen on the held-out slice (a distillation teacher): reloaded, it predicts the
    dev set as that epoch did during training."""
    import torch

    from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer
    from hf_multiencoder.data.loading import load_task

    run = json.loads((tmp_path / "runs" / "cola" / "dme" / "seed_1" / "result.json").read_text())
    chosen = 1 + int(np.argmax([e["heldout"] for e in run["epochs"]]))
    with np.load(tmp_path / "runs" / "cola" / "dme" / "seed_1" / "predictions.npz") as stored:
        expected = stored[f"dev_outputs_{chosen}"]
    folder = tmp_path / "models" / "cola" / "dme" / "seed_1"
    model = MultiEncoderForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = MultiEncoderTokenizer.from_pretrained(folder)
    dev = load_task("cola", data_dir=shared_data)[0]["validation"].select(range(48))
    with torch.no_grad():
        logits = model(**tokenizer(list(dev["sentence1"]), padding=True, truncation=True, max_length=48,
                                   return_tensors="pt")).logits
    np.testing.assert_allclose(torch.softmax(logits, -1).numpy(), expected, atol=1e-4)


def test_num_train_epochs_reaches_every_run_and_refuses_rows_with_their_own(tmp_path, script_main, capsys,
                                                                            monkeypatch):
    """`--num_train_epochs 10` (the seed's budget) is passed to each run's process and prices the runs left per epoch;
    a row whose epochs are set for the 3-epoch budget (MPNet_4ep) is refused with it rather than silently kept at 4."""
    import subprocess
    import sys
    from types import SimpleNamespace

    main = script_main(SCRIPT)
    sweep = sys.modules["script_glue_sweep"]
    with pytest.raises(SystemExit) as exit_:
        main(["--rows", "MPNet", "MPNet_4ep", "--num_train_epochs", "10", "--runs_dir", str(tmp_path)])
    assert exit_.value.code != 0 and "MPNet_4ep set their own epochs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--num_train_epochs", "0", "--report_only", "--runs_dir", str(tmp_path)])
    assert "--num_train_epochs must be at least 1" in capsys.readouterr().err

    commands = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: commands.append(cmd) or SimpleNamespace(returncode=0))
    main(["--tasks", "cola", "--rows", "MPNet", "--seeds", "1", "--num_train_epochs", "10", "--runs_dir",
          str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--checkpoints_dir", ""])
    assert len(commands) == 1 and commands[0][commands[0].index("--num_train_epochs") + 1] == "10"
    # the report (of no finished run: the run's process was not started) states the budget it was made for
    report = json.loads((tmp_path / "results" / "glue_finetuned.json").read_text())
    assert report["protocol"]["num_train_epochs"] == 10
    assert "10 epochs (`--num_train_epochs 10`)" in (tmp_path / "results" / "glue_finetuned.md").read_text()

    ten = SimpleNamespace(num_train_epochs=10)
    assert sweep.row_epochs("MPNet", ten) == 10 and sweep.row_epochs("MPNet", None) == 3
    reports = {"cola": {"rows": {"MPNet": {"train_seconds": 1000.0}}}}
    hours, _ = sweep.remaining_hours(reports, [("cola", "MPNet_dme", 1)], ten)  # 100 s an epoch, 10 epochs
    assert hours == pytest.approx(1000 / 3600)
