"""Rows with images: every form of an ``images`` entry decodes to the same pixels, sizes are fitted, and a missing or
broken image is an error naming the file and the row, before anything starts."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from reasonrl.data import load_rows
from reasonrl.data.images import ImageError, decode_image, fit_pixels, load_row_images
from reasonrl.data.overlap import text_overlaps
from reasonrl.data.sources import DataFormatError


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def picture():
    return np.random.default_rng(0).integers(0, 256, (12, 20, 3), dtype=np.uint8)


def test_paths_bytes_dicts_and_pil_images_decode_to_the_same_pixels(tmp_path, picture):
    (tmp_path / "a.png").write_bytes(_png(picture))
    forms = ["a.png", str(tmp_path / "a.png"), _png(picture), {"bytes": _png(picture)}, {"path": "a.png"}]
    forms.append(Image.fromarray(picture))
    for form in forms:
        decoded = decode_image(form, tmp_path, "row 0")
        assert decoded.mode == "RGB" and np.array_equal(np.asarray(decoded), picture), type(form)


def test_a_missing_or_broken_image_names_the_file_and_the_row(tmp_path):
    with pytest.raises(ImageError, match=r"row 3: image file '.*nope\.png' does not exist"):
        decode_image("nope.png", tmp_path, "row 3")
    (tmp_path / "bad.png").write_bytes(b"not a picture")
    with pytest.raises(ImageError, match=r"row 4: image file '.*bad\.png' cannot be decoded"):
        decode_image("bad.png", tmp_path, "row 4")
    with pytest.raises(ImageError, match="row 5: image bytes cannot be decoded"):
        decode_image(b"\x00\x01", tmp_path, "row 5")
    with pytest.raises(ImageError, match="neither 'bytes' nor 'path'"):
        decode_image({"other": 1}, tmp_path, "row 6")
    with pytest.raises(ImageError, match="must be a path, bytes"):
        decode_image(42, tmp_path, "row 7")


def test_fit_pixels_keeps_images_within_bounds_and_the_aspect_ratio(picture):
    image = Image.fromarray(picture)  # 20 x 12 = 240 pixels
    assert fit_pixels(image, 100, 1000) is image
    small = fit_pixels(image, None, 60)
    assert small.width * small.height <= 60 and abs(small.width / small.height - 20 / 12) < 0.35
    large = fit_pixels(image, 960, None)
    assert large.width * large.height >= 0.9 * 960 and large.size == (40, 24)


def test_each_image_needs_its_placeholder(tmp_path, picture):
    row = {"id": "r", "question": "<image> and <image>: which is larger?", "images": [_png(picture)]}
    with pytest.raises(ImageError, match="2 <image> placeholder.*for 1 image"):
        load_row_images(row, tmp_path, "row 0")
    with pytest.raises(ImageError, match="more than max_images_per_prompt=1"):
        load_row_images(row | {"images": [_png(picture)] * 2}, tmp_path, "row 0", max_images=1)


def test_load_rows_reads_easyr1_rows_with_images_next_to_the_data_file(tmp_path, picture):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "0.png").write_bytes(_png(picture))
    rows = [{"problem": "<image>How many dots?", "answer": "3", "images": ["img/0.png"]}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (row,) = load_rows(tmp_path / "train.jsonl", max_pixels=60).rows
    assert row["question"] == "<image>How many dots?" and row["answer"] == "3"
    (image,) = row["images"]
    assert image.dtype == np.uint8 and image.shape[2] == 3 and image.shape[0] * image.shape[1] <= 60


def test_load_rows_refuses_a_missing_image_naming_the_line_and_the_file(tmp_path):
    rows = [{"problem": "<image>How many?", "answer": "3", "images": ["img/missing.png"]}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataFormatError, match=r"train\.jsonl:1.*image file '.*img/missing\.png' does not exist"):
        load_rows(tmp_path / "train.jsonl")


def test_parquet_rows_carry_their_image_bytes(tmp_path, picture):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "problem": ["<image>How many?"],
            "answer": ["2"],
            "images": [[{"bytes": _png(picture), "path": None}]],
        }
    )
    pq.write_table(table, tmp_path / "train.parquet")
    (row,) = load_rows(tmp_path / "train.parquet").rows
    assert np.array_equal(row["images"][0], picture)


def test_rows_that_differ_only_by_their_picture_are_not_duplicates_nor_overlaps(tmp_path):
    a = np.zeros((8, 8, 3), np.uint8)
    b = np.full((8, 8, 3), 255, np.uint8)
    rows = [{"problem": "<image>How many?", "answer": "1", "images": [_png(p)]} for p in (a, b, a)]
    loaded = load_rows_from(tmp_path, rows)
    assert loaded.num_duplicates == 1  # the third repeats the first, picture included
    train, held = loaded.rows[:1], loaded.rows[1:2]
    assert text_overlaps(train, {"held": held}) == []
    assert len(text_overlaps(train, {"held": loaded.rows[2:]})) == 1


def load_rows_from(folder, rows):
    """``rows`` (with PNG bytes as images) written as a parquet file in ``folder`` and loaded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {k: [r[k] for r in rows] for k in ("problem", "answer")}
    columns["images"] = [[{"bytes": b, "path": None} for b in r["images"]] for r in rows]
    pq.write_table(pa.table(columns), folder / "rows.parquet")
    return load_rows(folder / "rows.parquet")


def test_a_saved_hf_dataset_with_an_image_feature_loads_its_pictures(tmp_path, picture):
    """A ``datasets`` folder (``save_to_disk``) whose ``images`` column has the ``Image`` feature, as Hub datasets
    such as hiyouga/geometry3k store it."""
    import datasets

    features = datasets.Features(
        {"problem": datasets.Value("string"), "answer": datasets.Value("string"), "images": [datasets.Image()]}
    )
    data = {"problem": ["<image>How many?"], "answer": ["4"], "images": [[Image.fromarray(picture)]]}
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(tmp_path / "snapshot"))
    (row,) = load_rows(tmp_path / "snapshot").rows
    assert row["question"] == "<image>How many?" and np.array_equal(row["images"][0], picture)


def test_placeholders_are_written_as_the_model_writes_them():
    from reasonrl.data.images import with_model_placeholder

    qwen = "<|vision_start|><|image_pad|><|vision_end|>"
    assert with_model_placeholder("<image>a<image>b", qwen) == f"{qwen}a{qwen}b"
    assert with_model_placeholder("<image>a", "<image>") == "<image>a"  # Idefics3 writes it as the rows do
    assert with_model_placeholder("<image>a", None) == "<image>a"  # a text-only model: nothing to replace
