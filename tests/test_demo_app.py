"""The demo page (`space/app.py`) on tiny random members: the layout chosen from the saved config, the prediction
and the fusion weights through `gradio_client` against the launched app (classifier, sentence pair, regressor,
tagger, a fusion without weights), and the page in a real headless browser (Debian's `chromium` driven by
playwright): it loads, a submitted sentence shows the members' weights."""

import contextlib
import importlib.util
import os
import shutil
import socket

import pytest
import torch

from hf_multiencoder import (
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderTokenizer,
)

gr = pytest.importorskip("gradio", reason="the demo page needs gradio (pip install -e '.[demo]')")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP_FILE = os.path.join(REPO_ROOT, "space", "app.py")
NAMES = ["bert", "roberta"]
LABELS = {0: "unacceptable", 1: "acceptable"}
TAGS = {0: "O", 1: "B-LOC", 2: "I-LOC"}


@pytest.fixture(scope="module")
def app():
    """`space/app.py` as a module (the Space's single source file, loaded by its path)."""
    spec = importlib.util.spec_from_file_location("multiencoder_demo_app", APP_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def save_model(tiny_paths, tmp_path_factory):
    """`save_model(head_class, fusion=..., **config)`: a saved multi-encoder folder of the tiny BERT and RoBERTa."""
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths[:2], encoder_names=NAMES)

    def save(head, fusion="dme", **config):
        torch.manual_seed(0)
        model = head.from_encoders(tiny_paths[:2], encoder_names=NAMES, fusion=fusion, **config)
        folder = tmp_path_factory.mktemp(f"{head.__name__}-{fusion}")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return str(folder)

    return save


@pytest.fixture(scope="module")
def classifier(save_model):
    return save_model(MultiEncoderForSequenceClassification, num_labels=2, id2label=LABELS)


@pytest.fixture(scope="module")
def tagger(save_model):
    return save_model(MultiEncoderForTokenClassification, num_labels=3, id2label=TAGS)


@contextlib.contextmanager
def served(demo):
    """The page launched on 127.0.0.1 at a free port, closed afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def _client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


def _table(value) -> list[dict]:
    """A `gr.Dataframe` output as the client returns it (headers + rows), as a list of row dicts."""
    return [dict(zip(value["headers"], row)) for row in value["data"]]


def test_the_layout_follows_the_saved_head(app, classifier, tagger, save_model):
    from transformers import AutoConfig

    assert app.model_task(AutoConfig.from_pretrained(classifier, trust_remote_code=True)) == app.CLASSIFICATION_TASK
    assert app.model_task(AutoConfig.from_pretrained(tagger, trust_remote_code=True)) == app.NER_TASK
    config = AutoConfig.from_pretrained(tagger, trust_remote_code=True)
    config.custom_pipelines = None  # an older save: the architecture decides
    assert app.model_task(config) == app.NER_TASK
    config.architectures = ["BertModel"]
    with pytest.raises(ValueError, match="not a multi-encoder sequence classifier or tagger"):
        app.model_task(config)
    for folder, boxes in ((classifier, {"Sentence", "Second sentence (optional)"}), (tagger, {"Sentence"})):
        demo = app.build_demo(folder)
        assert isinstance(demo, gr.Blocks)
        labels = {b.label for b in demo.blocks.values() if isinstance(b, gr.Textbox)}
        assert labels == boxes
    highlighted = [b for b in app.build_demo(tagger).blocks.values() if isinstance(b, gr.HighlightedText)]
    assert len(highlighted) == 1


def test_the_outputs_from_pipeline_results(app):
    label, bars, table, note = app.classification_outputs(
        [{"label": "acceptable", "score": 0.7, "fusion_weights": {"a": 0.25, "b": 0.75}},
         {"label": "unacceptable", "score": 0.3, "fusion_weights": {"a": 0.25, "b": 0.75}}], False, "dme")
    assert label == {"acceptable": 0.7, "unacceptable": 0.3} and note == ""
    assert bars.to_dict("list") == {"member": ["a", "b"], "weight": [0.25, 0.75]}
    score, bars, _, note = app.classification_outputs({"score": 3.5, "fusion_weights": None}, True, "concat")
    assert score == 3.5 and bars.empty and "concat" in note
    text = "Paris and Paris"
    words = [{"entity": "B-LOC", "score": 0.9, "index": i, "word": "Paris", "start": s, "end": s + 5,
              "fusion_weights": {"a": 0.5 + i / 10, "b": 0.5 - i / 10}} for i, s in ((0, 0), (2, 10))]
    entities = [{"entity_group": "LOC", "score": 0.9, "word": "Paris", "start": s, "end": s + 5,
                 "fusion_weights": {"a": 0.5, "b": 0.5}} for s in (0, 10)]
    highlighted, bars, table, note = app.ner_outputs(text, entities, words, ["a", "b"], "dme")
    assert highlighted == {"text": text, "entities": [{"entity": "LOC", "start": 0, "end": 5},
                                                      {"entity": "LOC", "start": 10, "end": 15}]}
    assert list(bars["word"].unique()) == ["Paris (1)", "Paris (3)"]  # a repeated word keeps its own bar
    assert table.to_dict("list") == {"word": ["Paris", "Paris"], "tag": ["B-LOC", "B-LOC"], "score": [0.9, 0.9],
                                     "a": [0.5, 0.7], "b": [0.5, 0.3]}
    _, bars, table, note = app.ner_outputs("x y", [], [], ["a", "b"], "dme")
    assert bars.empty and table.empty and "No word" in note


@pytest.mark.slow
def test_client_classifier_pair_and_regressor(app, classifier, save_model):
    with served(app.build_demo(classifier)) as url:
        client = _client(url)
        label, bars, table, note = client.predict("He can will go", "", api_name="/predict")
        assert label["label"] in LABELS.values() and note == ""
        assert sum(c["confidence"] for c in label["confidences"]) == pytest.approx(1, abs=1e-3)
        weights = {row["member"]: row["weight"] for row in _table(table)}
        assert list(weights) == NAMES and sum(weights.values()) == pytest.approx(1, abs=1e-3)
        assert bars["columns"] == ["member", "weight"] and bars["data"] == [[n, weights[n]] for n in NAMES]
        pair_label, _, pair_table, _ = client.predict("A man plays.", "Someone plays.", api_name="/predict")
        pair_weights = {row["member"]: row["weight"] for row in _table(pair_table)}
        assert sum(pair_weights.values()) == pytest.approx(1, abs=1e-3)
        assert pair_weights != pytest.approx(weights, abs=1e-6)  # the second sentence reached the model
    regressor = save_model(MultiEncoderForSequenceClassification, num_labels=1, problem_type="regression")
    concat = save_model(MultiEncoderForSequenceClassification, fusion="concat", num_labels=2, id2label=LABELS)
    with served(app.build_demo(regressor)) as url:
        score, _, table, _ = _client(url).predict("A man plays.", "Someone plays.", api_name="/predict")
        assert isinstance(score, float)
        assert sum(row["weight"] for row in _table(table)) == pytest.approx(1, abs=1e-3)
    with served(app.build_demo(concat)) as url:
        label, _, table, note = _client(url).predict("He can will go", "", api_name="/predict")
        assert label["label"] in LABELS.values() and not _table(table) and "concat" in note


@pytest.mark.slow
def test_client_tagger_words_and_weights(app, tagger):
    text = "Paris is in France and New York"
    with served(app.build_demo(tagger)) as url:
        highlighted, bars, table, note = _client(url).predict(text, api_name="/predict")
    rows = _table(table)
    assert rows, "the tiny tagger tags some words"
    for row in rows:
        assert row["word"] in text and row["tag"] in {"B-LOC", "I-LOC"}
        assert sum(row[name] for name in NAMES) == pytest.approx(1, abs=1e-3)
    spans = [e for e in highlighted if e["class_or_confidence"] is not None] if isinstance(highlighted, list) else []
    assert spans and all(e["class_or_confidence"] == "LOC" for e in spans)


def _chromium_or_skip():
    pytest.importorskip("playwright.sync_api", reason="the browser test needs playwright (pip install playwright)")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium, or `make browser`)")
    return chromium


@pytest.mark.slow
def test_the_page_in_a_headless_browser(app, classifier, tmp_path):
    chromium = _chromium_or_skip()
    from playwright.sync_api import expect, sync_playwright

    with served(app.build_demo(classifier)) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--headless=new"])
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 720})
            # generous timeouts: the page's scripts load slowly while other tests keep the machine's cores busy
            page.goto(url, timeout=120_000)
            expect(page.get_by_text("bert + roberta", exact=False).first).to_be_visible(timeout=120_000)
            page.get_by_label("Sentence", exact=True).fill("He can will go")
            page.get_by_role("button", name="Predict").click()
            table = page.locator("#fusion-weights-table")
            for name in NAMES:
                expect(table.get_by_role("gridcell", name=name, exact=True)).to_be_visible(timeout=120_000)
            cells = table.get_by_role("gridcell").all_inner_texts()
            numbers = [float(t) for t in cells if t.strip().replace(".", "", 1).isdigit()]
            assert len(numbers) == 2 and sum(numbers) == pytest.approx(1, abs=2e-3)
            shot = tmp_path / "demo.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        finally:
            browser.close()
