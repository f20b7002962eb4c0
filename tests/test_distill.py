"""Distilling a multi-encoder teacher into one plain model (`hf_multiencoder.training.distill`, `run_distill.py`) on
tiny members: the loss, the teacher's cached logits, a student that moves towards its teacher, and an output folder
that loads without this package."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

import run_distill  # the repository root is on pytest's pythonpath (pyproject.toml)
from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer
from hf_multiencoder.testing_utils import run_without_package
from hf_multiencoder.training.distill import distillation_loss, teacher_logits

NAMES = ["bert", "roberta"]
SENTENCES = ["the cat sat on the mat", "he can will go", "she went to paris", "john smith likes new york",
             "a dog runs quickly", "it was in 2024", "the mat sat on a cat", "somebody just left"]


@pytest.fixture(scope="module")
def teacher_folder(tiny_paths, tmp_path_factory):
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(
        tiny_paths[:2], encoder_names=NAMES, fusion="dme", num_labels=2, id2label={0: "no", 1: "yes"},
        label2id={"no": 0, "yes": 1})
    with torch.no_grad():  # a teacher with clear opinions: a large random head
        model.classifier.weight.mul_(40)
    folder = tmp_path_factory.mktemp("teacher")
    model.save_pretrained(folder)
    MultiEncoderTokenizer.from_encoders(tiny_paths[:2], encoder_names=NAMES).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    rows = [(s, "yes" if i % 2 else "no") for i, s in enumerate(SENTENCES * 4)]
    for name, part in (("train.csv", rows), ("dev.csv", rows[:8])):
        (folder / name).write_text("sentence1,label\n" + "".join(f"{s},{y}\n" for s, y in part))
    (folder / "more.txt").write_text("the dog sat\nparis is new\n")
    return folder


def test_distillation_loss_mixes_soft_and_hard_targets():
    torch.manual_seed(0)
    student, teacher = torch.randn(4, 3), torch.randn(4, 3)
    labels = torch.tensor([0, 2, -1, 1])  # the third example has no label: soft targets only
    t = 3.0
    soft = F.kl_div(F.log_softmax(student / t, -1), F.softmax(teacher / t, -1), reduction="batchmean") * t * t
    hard = F.cross_entropy(student[[0, 1, 3]], labels[[0, 1, 3]])
    assert distillation_loss(student, teacher, labels, temperature=t, alpha=1.0) == pytest.approx(float(soft), 1e-5)
    assert distillation_loss(student, teacher, labels, temperature=t, alpha=0.0) == pytest.approx(float(hard), 1e-5)
    mixed = distillation_loss(student, teacher, labels, temperature=t, alpha=0.3)
    assert mixed == pytest.approx(0.3 * float(soft) + 0.7 * float(hard), 1e-5)
    assert distillation_loss(teacher, teacher, None) == pytest.approx(0.0, abs=1e-6)  # the teacher's own logits
    # regression: MSE to the teacher's prediction and to the label; NaN labels count in the soft part only
    s, te, y = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.0], [4.0]]), torch.tensor([3.0, math.nan])
    assert distillation_loss(s, te, y, alpha=0.5, regression=True) == pytest.approx(0.5 * 2.5 + 0.5 * 4.0)


def test_teacher_logits_are_computed_once_and_cached(teacher_folder, tmp_path):
    teacher = MultiEncoderForSequenceClassification.from_pretrained(teacher_folder).eval()
    tokenizer = MultiEncoderTokenizer.from_pretrained(teacher_folder)
    logits, weights = teacher_logits(teacher, tokenizer, SENTENCES, batch_size=3, cache_dir=str(tmp_path),
                                     return_fusion_weights=True)
    with torch.no_grad():  # batched by length, returned in input order
        expected = teacher(**tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt"))
    assert logits == pytest.approx(expected.logits.numpy(), abs=1e-4)
    assert weights == pytest.approx(expected.fusion_weights.numpy(), abs=1e-4)  # the DME weights, the same pass
    assert len(list(tmp_path.glob("teacher_logits_*.npy"))) == 1
    teacher.forward = None  # a second call must not run the teacher
    again = teacher_logits(teacher, tokenizer, SENTENCES, batch_size=3, cache_dir=str(tmp_path))
    assert (again == logits).all()
    assert (teacher_logits(teacher, tokenizer, SENTENCES, cache_dir=str(tmp_path), return_fusion_weights=True)[1]
            == weights).all()
    with pytest.raises(TypeError):  # other texts are not served from the cache
        teacher_logits(teacher, tokenizer, SENTENCES[:2], cache_dir=str(tmp_path))


@pytest.mark.slow
def test_run_distill_student_follows_teacher_and_loads_without_the_package(teacher_folder, task_files, tiny_paths,
                                                                           tmp_path):
    teacher = MultiEncoderForSequenceClassification.from_pretrained(teacher_folder).eval()
    tokenizer = MultiEncoderTokenizer.from_pretrained(teacher_folder)
    with torch.no_grad():
        target = teacher(**tokenizer(SENTENCES, padding=True, return_tensors="pt")).logits.softmax(-1)
    out = tmp_path / "student"
    metrics = run_distill.main([
        "--teacher", teacher_folder, "--student", tiny_paths[0], "--train_file", str(task_files / "train.csv"),
        "--validation_file", str(task_files / "dev.csv"), "--unlabelled_file", str(task_files / "more.txt"),
        "--alpha", "1.0", "--temperature", "1.0", "--output_dir", str(out), "--num_train_epochs", "15",
        "--learning_rate", "3e-3", "--per_device_train_batch_size", "8", "--use_cpu", "true", "--report_to", "none",
        "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "0"])
    assert "eval_validation_accuracy" in metrics["validation"]
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    student = AutoModelForSequenceClassification.from_pretrained(out).eval()
    student_tok = AutoTokenizer.from_pretrained(out)
    untrained = AutoModelForSequenceClassification.from_pretrained(tiny_paths[0], num_labels=2).eval()

    def agreement_gap(model):  # KL(teacher || model) over the training sentences
        with torch.no_grad():
            logits = model(**student_tok(SENTENCES, padding=True, return_tensors="pt")).logits
        return float(F.kl_div(logits.log_softmax(-1), target, reduction="batchmean"))

    assert agreement_gap(student) < 0.5 * agreement_gap(untrained)  # the student learnt the teacher's outputs
    assert student.config.id2label == {0: "no", 1: "yes"}
    card = (out / "README.md").read_text()
    assert "distillation" in card and teacher_folder in card and "bert, roberta" in card
    assert json.load(open(out / "eval_results.json"))["validation"]
    assert list((out / "teacher_cache").glob("teacher_logits_*.npy"))
    # a standard transformers folder: no remote code, no auto_map, loads where hf_multiencoder is not installed
    assert "auto_map" not in json.load(open(out / "config.json"))
    loaded = run_without_package(f"""
        import json
        from transformers import pipeline
        clf = pipeline("text-classification", model={str(out)!r})
        print(json.dumps(clf("the cat sat on the mat")[0]))
    """, cwd=tmp_path)
    assert loaded["label"] in {"no", "yes"}


def test_run_distill_refuses_bad_arguments(teacher_folder, tiny_paths, task_files, tmp_path):
    base = ["--output_dir", str(tmp_path / "o"), "--use_cpu", "true", "--report_to", "none"]
    with pytest.raises(ValueError, match="--teacher"):
        run_distill.main(["--student", tiny_paths[0], "--task_name", "cola", *base])
    with pytest.raises(ValueError, match="one or the other"):
        run_distill.main(["--teacher", teacher_folder, "--student", tiny_paths[0], "--task_name", "cola",
                          "--train_file", str(task_files / "train.csv"), *base])
    with pytest.raises(ValueError, match="temperature"):
        run_distill.main(["--teacher", teacher_folder, "--student", tiny_paths[0], "--train_file",
                          str(task_files / "train.csv"), "--temperature", "0", *base])
