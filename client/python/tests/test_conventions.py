"""The Python conventions give every rank exactly the boxes the planner's own model layouts
give (refitctl plan --model ... --layouts-out, the layouts the benchmarks use), for
Megatron trainers (PP, EP, ETP, TP) and vLLM engines (TP with replicated KV heads, EP)."""
import json
import os
import subprocess
import tempfile
import unittest

from refit import conventions

REFITCTL = os.environ.get("REFITCTL", "")


def model_layouts(model, src, dst):
    """The two LayoutSpecs refitctl expands `model` to, as parsed JSON."""
    with tempfile.TemporaryDirectory() as folder:
        prefix = os.path.join(folder, "layouts")
        subprocess.run([REFITCTL, "plan", "--model", model, "--src-parallel", src,
                        "--dst-parallel", dst, "--layouts-out", prefix],
                       check=True, stdout=subprocess.DEVNULL)
        with open(prefix + ".src.json") as s, open(prefix + ".dst.json") as d:
            return json.load(s), json.load(d)


def parallel(text):
    return {key: int(value) for key, value in (part.split("=") for part in text.split(","))}


def boxes_of(rank_layout):
    return {v["tensor"]: (tuple(int(x) for x in v.get("offset", [])),
                          tuple(int(x) for x in v.get("extent", [])))
            for v in rank_layout.get("views", [])}


class ConventionsMatchThePlannerTest(unittest.TestCase):
    def check(self, model, src, dst, kv_heads=None):
        sources, destinations = model_layouts(model, src, dst)
        shapes = {t["name"]: tuple(int(d) for d in t["shape"]) for t in sources["tensors"]}
        for side, spec, layout in (("source", sources, conventions.megatron_rank_boxes),
                                   ("destination", destinations, conventions.vllm_rank_boxes)):
            settings = parallel(src if side == "source" else dst)
            ranks = 1
            for key in ("tp", "pp", "ep", "dp") if side == "source" else ("tp", "dp"):
                ranks *= settings.get(key, 1)
            self.assertEqual(len(spec["ranks"]), ranks, f"{model} {side}")
            for rank_layout in spec["ranks"]:
                rank = int(rank_layout.get("rank", 0))
                mine = {name: (box.offset, box.extent) for name, box in
                        layout(shapes, rank, kv_heads=kv_heads, **settings).items()}
                self.assertTrue(mine)
                self.assertEqual(mine, boxes_of(rank_layout), f"{model} {side} rank {rank}")

    def test_deepseek_style_mini_model(self):
        self.check("dsv3-mini", "pp=2,ep=2", "tp=2,dp=2")
        self.check("dsv3-mini", "tp=2,pp=3,ep=2,etp=2", "tp=4,dp=2,ep=8")

    def test_qwen3_moe_with_kv_heads_replicated_past_the_tp_size(self):
        # Qwen3-235B-A22B has 4 KV heads (its config.json): TP 16 replicates each on 4 ranks.
        self.check("qwen3-235b-a22b", "tp=4,pp=2,ep=2,etp=2", "tp=16", kv_heads=4)


if __name__ == "__main__":
    unittest.main()
