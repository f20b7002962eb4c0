"""A demo page for a saved multi-encoder model: type a sentence (or a sentence pair), see the prediction and how much
of each member encoder it used.

    MODEL=path/to/folder python app.py          # or: python app.py path/to/folder  (a Hub id works too)

On a Hugging Face Space, set the `MODEL` variable (and `REVISION`: a commit of the model repository, since the model's
own code runs with `trust_remote_code=True`: pin the code you trust). The page needs only torch, transformers and
gradio: the saved folder ships its code, including the pipelines that return the fusion weights
(`multiencoder-classification` for a sequence classifier or regressor, `multiencoder-ner` for a tagger).

`build_demo(model, revision=None)` returns the page as a `gr.Blocks`; the layout follows the model's head:

- classification: the label with its probability, a bar chart of each member's fusion weight and the same weights as
  a table; a second, optional box takes the second sentence of a pair (leave it empty for single sentences);
  regression: the score instead of the label;
- NER: the sentence with its entities highlighted, a bar chart of each tagged word's member weights (stacked to 1)
  and a table of the tagged words, their tags, scores and member weights.

A model fused by concatenation (`concat`) has no fusion weights: the page says so and shows the prediction only.
"""

from __future__ import annotations

import os
import sys

import gradio as gr
import pandas as pd
from transformers import AutoConfig, pipeline

CLASSIFICATION_TASK = "multiencoder-classification"
NER_TASK = "multiencoder-ner"
NO_WEIGHTS = "This model's fusion ({fusion}) has no per-member weights: only the prediction is shown."


def model_task(config) -> str:
    """`multiencoder-ner` for a tagger, `multiencoder-classification` for a sequence classifier or regressor: from the
    pipeline the saved config lists (`custom_pipelines`), else from its architecture."""
    listed = getattr(config, "custom_pipelines", None) or {}
    for task in (NER_TASK, CLASSIFICATION_TASK):
        if task in listed:
            return task
    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith("ForTokenClassification") for a in architectures):
        return NER_TASK
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return CLASSIFICATION_TASK
    raise ValueError(f"{getattr(config, '_name_or_path', 'This model')} is not a multi-encoder sequence classifier or "
                     f"tagger (architectures {architectures}, custom_pipelines {sorted(listed)}).")


def _is_regression(config) -> bool:
    return config.problem_type == "regression" or config.num_labels == 1


def classification_outputs(result: dict | list, regression: bool, fusion: str):
    """(prediction, bar chart data, weights table, note) from the classification pipeline's output (`top_k` set)."""
    ranked = [result] if isinstance(result, dict) else result
    weights = ranked[0]["fusion_weights"]
    prediction = round(ranked[0]["score"], 4) if regression else {r["label"]: r["score"] for r in ranked}
    if weights is None:
        empty = pd.DataFrame({"member": [], "weight": []})
        return prediction, empty, empty, NO_WEIGHTS.format(fusion=fusion)
    frame = pd.DataFrame({"member": list(weights), "weight": [round(w, 4) for w in weights.values()]})
    return prediction, frame, frame, ""


def ner_outputs(text: str, entities: list[dict], words: list[dict], names: list[str], fusion: str):
    """(highlighted sentence, bar chart data, per-word table, note) from the NER pipeline's outputs: `entities` with
    `aggregation_strategy="simple"`, `words` with `"none"`."""
    highlighted = {"text": text, "entities": [{"entity": e["entity_group"], "start": e["start"], "end": e["end"]}
                                              for e in entities]}
    table = pd.DataFrame({"word": [w["word"] for w in words], "tag": [w["entity"] for w in words],
                          "score": [round(w["score"], 4) for w in words]})
    has_weights = bool(words) and words[0]["fusion_weights"] is not None
    note = "" if words else "No word of this sentence is tagged as an entity."
    if not has_weights:
        return highlighted, pd.DataFrame({"word": [], "member": [], "weight": []}), table, \
            note or NO_WEIGHTS.format(fusion=fusion)
    for name in names:
        table[name] = [round(w["fusion_weights"][name], 4) for w in words]
    # one stacked bar per tagged word (its position keeps repeated words apart), one colour per member
    bars = pd.DataFrame([{"word": f"{w['word']} ({w['index'] + 1})", "member": name,
                          "weight": round(w["fusion_weights"][name], 4)} for w in words for name in names])
    return highlighted, bars, table, note


def build_demo(model: str, revision: str | None = None) -> gr.Blocks:
    """The demo page for a saved multi-encoder folder or Hub id (`revision`: the commit to load; pin one, since the
    model's own code runs)."""
    loading = {"trust_remote_code": True, **({"revision": revision} if revision else {})}
    config = AutoConfig.from_pretrained(model, **loading)
    task = model_task(config)
    predictor = pipeline(task, model=model, **loading)
    names, fusion = list(config.encoder_names), config.fusion
    regression = task == CLASSIFICATION_TASK and _is_regression(config)
    has_weights = getattr(getattr(predictor.model.base_model, "fusion", None), "has_weights", True)
    kind = "tagger" if task == NER_TASK else "regressor" if regression else "classifier"
    intro = (f"## {os.path.basename(os.path.normpath(model))}\n\nA multi-encoder {kind}: **{' + '.join(names)}**, "
             f"fused by `{fusion}`. Each member reads the text with its own tokenizer; "
             + ("the fusion weights say how much of each member the prediction used." if has_weights
                else "this fusion has no per-member weights."))

    with gr.Blocks(title=f"Multi-encoder demo: {' + '.join(names)}") as demo:
        gr.Markdown(intro)
        with gr.Row():
            with gr.Column():
                sentence = gr.Textbox(label="Sentence", lines=2, placeholder="Type a sentence")
                inputs = [sentence]
                if task == CLASSIFICATION_TASK:
                    pair = gr.Textbox(label="Second sentence (optional)", lines=2,
                                      placeholder="For a sentence-pair model; leave empty for one sentence")
                    inputs.append(pair)
                button = gr.Button("Predict", variant="primary")
                note = gr.Markdown()
            with gr.Column():
                if task == CLASSIFICATION_TASK:
                    prediction = gr.Number(label="Score") if regression else \
                        gr.Label(label="Prediction", num_top_classes=min(config.num_labels, 5))
                    chart = gr.BarPlot(x="member", y="weight", color="member", y_lim=[0, 1], label="Fusion weights",
                                       sort=names)
                    table = gr.Dataframe(label="Fusion weights", elem_id="fusion-weights-table", interactive=False)
                else:
                    prediction = gr.HighlightedText(label="Entities", show_legend=True)
                    chart = gr.BarPlot(x="word", y="weight", color="member", y_lim=[0, 1],
                                       label="Fusion weights of each tagged word")
                    table = gr.Dataframe(label="Tagged words and their fusion weights",
                                         elem_id="fusion-weights-table", interactive=False)

        def classify(text: str, text_pair: str = ""):
            if not text or not text.strip():
                raise gr.Error("Type a sentence first.")
            example = {"text": text, "text_pair": text_pair} if text_pair and text_pair.strip() else text
            result = predictor(example, top_k=None if regression else config.num_labels)
            return classification_outputs(result, regression, fusion)

        def tag(text: str):
            if not text or not text.strip():
                raise gr.Error("Type a sentence first.")
            entities = predictor(text, aggregation_strategy="simple")
            words = predictor(text, aggregation_strategy="none")
            highlighted, bars, words_table, message = ner_outputs(text, entities, words, names, fusion)
            chart_update = gr.BarPlot(value=bars, sort=list(dict.fromkeys(bars["word"])) or None)
            return highlighted, chart_update, words_table, message

        fn = classify if task == CLASSIFICATION_TASK else tag
        outputs = [prediction, chart, table, note]
        button.click(fn, inputs=inputs, outputs=outputs, api_name="predict")
        sentence.submit(fn, inputs=inputs, outputs=outputs, api_name=False)
    return demo


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MODEL")
    if not model:
        sys.exit("Name the model: MODEL=<saved folder or Hub id> python app.py (or pass it as the first argument); "
                 "REVISION=<commit> pins the code it runs.")
    # the host and port come from GRADIO_SERVER_NAME / GRADIO_SERVER_PORT where set (a Space sets them)
    build_demo(model, revision=os.environ.get("REVISION")).launch()


if __name__ == "__main__":
    main()
