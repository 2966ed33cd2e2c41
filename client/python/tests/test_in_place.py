"""In-place registration: the framework's own tensors become views of buffers refitd can
map (their storage moved once into named shared memory, the tensors themselves kept), fused
parameters are views of one buffer, and the vLLM-style views are the engine's rows."""
import os
import stat
import unittest

import torch

import refit
from refit import conventions
from refit.in_place import InPlaceMemory, _share_in_place


def segment_bytes(buffer):
    with open("/dev/shm/" + buffer.shm_name.lstrip("/"), "rb") as segment:
        return segment.read()


def element_at(buffer, view, index, dtype):
    """The element at `index` (local coordinates) of `view`, read from the segment file."""
    size = torch.tensor([], dtype=dtype).element_size()
    at = view.byte_offset + size * sum(i * s for i, s in zip(index, view.strides))
    return torch.frombuffer(bytearray(segment_bytes(buffer)[at:at + size]), dtype=dtype).item()


class InPlaceTest(unittest.TestCase):
    def test_a_modules_parameters_are_shared_where_they_are(self):
        torch.manual_seed(0)
        layer = torch.nn.Linear(6, 4)
        weight = layer.weight
        before = weight.detach().clone()
        boxes = {"w": refit.chunk((8, 6), 0, 1, 2), "b": refit.chunk((8,), 0, 1, 2)}
        memory = InPlaceMemory(3, {"w": layer.weight, "b": layer.bias}, boxes)
        self.assertIs(layer.weight, weight)  # the framework's tensor, not a copy
        self.assertTrue(torch.equal(layer.weight, before))
        self.assertEqual(len(memory.buffers), 2)
        for buffer in memory.buffers:
            path = "/dev/shm/" + buffer.shm_name.lstrip("/")
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            self.assertGreaterEqual(os.stat(path).st_size, buffer.bytes)
        # An optimizer step writes the same memory refitd maps.
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
        layer(torch.ones(2, 6)).sum().backward()
        optimizer.step()
        view = memory.views[0]
        self.assertEqual((tuple(view.offset), tuple(view.extent)), ((4, 0), (4, 6)))
        self.assertEqual(element_at(memory.buffers[0], view, (2, 3), torch.float32),
                         layer.weight[2, 3].item())
        self.assertNotEqual(layer.weight[2, 3].item(), before[2, 3].item())

    def test_fused_parameters_are_views_of_one_buffer_with_their_strides(self):
        qkv = torch.arange(10 * 4, dtype=torch.float32).reshape(10, 4)
        tensors = {"q": qkv[0:6], "k": qkv[6:8], "v": qkv[8:10], "vt": qkv[8:10].t()}
        boxes = {"q": refit.chunk((12, 4), 0, 0, 2), "k": refit.chunk((4, 4), 0, 0, 2),
                 "v": refit.chunk((4, 4), 0, 0, 2), "vt": refit.Box((4, 2), (0, 0), (4, 2))}
        memory = InPlaceMemory(0, tensors, boxes)
        self.assertEqual(len(memory.buffers), 1)
        self.assertEqual({v.buffer for v in memory.views}, {memory.buffers[0].name})
        start = memory.views[0].byte_offset  # where torch's segment keeps the storage's bytes
        self.assertEqual([v.byte_offset - start for v in memory.views],
                         [0, 6 * 16, 8 * 16, 8 * 16])
        self.assertEqual(memory.buffers[0].bytes, start + 10 * 16)
        self.assertEqual(list(memory.views[3].strides), [1, 4])
        self.assertEqual(element_at(memory.buffers[0], memory.views[3], (3, 1), torch.float32),
                         qkv[9, 3].item())

    def test_tied_weights_are_two_views_of_one_place(self):
        embed = torch.nn.Embedding(16, 4)
        head = torch.nn.Linear(4, 16, bias=False)
        head.weight = embed.weight  # tie_word_embeddings
        memory = InPlaceMemory(0, {"model.embed_tokens.weight": embed.weight,
                                   "lm_head.weight": head.weight},
                               {"model.embed_tokens.weight": refit.replicated((16, 4)),
                                "lm_head.weight": refit.replicated((16, 4))})
        self.assertEqual(len(memory.buffers), 1)
        self.assertEqual(memory.views[0].byte_offset, memory.views[1].byte_offset)

    def test_empty_shards_are_declared_without_a_view(self):
        memory = InPlaceMemory(2, {"w": torch.zeros(1, 3), "tail": torch.zeros(0, 3)},
                               {"w": refit.chunk((2, 3), 0, 1, 3),
                                "tail": refit.chunk((2, 3), 0, 2, 3)})
        self.assertEqual([v.tensor for v in memory.views], ["w"])
        self.assertEqual(set(memory.boxes), {"w", "tail"})

    def test_bad_tensors_are_refused_with_the_reason(self):
        with self.assertRaisesRegex(ValueError, "rank 1: tensor w has shape \\(4, 4\\) but"):
            InPlaceMemory(1, {"w": torch.zeros(4, 4)}, {"w": refit.chunk((4, 4), 0, 0, 2)})
        with self.assertRaisesRegex(KeyError, "tensor w has no box"):
            InPlaceMemory(1, {"w": torch.zeros(4)}, {})
        with self.assertRaisesRegex(ValueError, "expanded view"):
            InPlaceMemory(1, {"w": torch.zeros(1, 4).expand(3, 4)},
                          {"w": refit.replicated((3, 4))})
        with self.assertRaisesRegex(ValueError, "share one device"):
            InPlaceMemory(1, {"a": torch.zeros(2), "b": torch.zeros(2, device="meta")},
                          {"a": refit.replicated((2,)), "b": refit.replicated((2,))})

    def test_a_torch_without_in_place_sharing_is_named(self):
        # The private call the in-place path needs, missing: the error names the torch.
        with self.assertRaisesRegex(ValueError, f"tensor w: torch {torch.__version__} cannot "
                                                f"move a storage into shared memory in place"):
            _share_in_place("w", object())


class ConventionsTest(unittest.TestCase):
    def full_model(self):
        torch.manual_seed(1)
        shapes = {"model.embed_tokens.weight": (16, 8), "lm_head.weight": (16, 8),
                  "model.norm.weight": (8,),
                  "model.layers.0.self_attn.q_proj.weight": (8, 8),
                  "model.layers.0.self_attn.k_proj.weight": (4, 8),
                  "model.layers.0.self_attn.v_proj.weight": (4, 8),
                  "model.layers.0.self_attn.o_proj.weight": (8, 8),
                  "model.layers.0.mlp.gate_proj.weight": (12, 8),
                  "model.layers.0.mlp.up_proj.weight": (12, 8),
                  "model.layers.0.mlp.down_proj.weight": (8, 12),
                  "model.layers.0.input_layernorm.weight": (8,)}
        return {name: torch.randn(shape) for name, shape in shapes.items()}

    def test_megatron_boxes_split_columns_rows_and_vocabulary(self):
        box = conventions.megatron_box
        self.assertEqual(box("model.layers.3.self_attn.k_proj.weight", (4, 8), 1, 2).offset, (2, 0))
        self.assertEqual(box("model.layers.3.mlp.down_proj.weight", (8, 12), 1, 2).offset, (0, 6))
        self.assertEqual(box("lm_head.weight", (16, 8), 1, 2).offset, (8, 0))
        self.assertEqual(box("model.norm.weight", (8,), 1, 2).extent, (8,))

    def test_vllm_views_are_the_fused_engine_rows(self):
        full = self.full_model()
        shapes = {name: tuple(t.shape) for name, t in full.items()}
        for tp_rank in range(2):
            engine = conventions.fuse_like_vllm(full, tp_rank, 2)
            self.assertEqual(tuple(engine["model.layers.0.self_attn.qkv_proj.weight"].shape),
                             (8, 8))
            self.assertEqual(tuple(engine["model.layers.0.mlp.gate_up_proj.weight"].shape),
                             (12, 8))
            tensors, boxes = conventions.vllm_views(engine, shapes, tp_rank, 2)
            self.assertEqual(set(tensors), set(full))
            for name, view in tensors.items():
                self.assertTrue(torch.equal(view, full[name][boxes[name].slices()]), name)
            qkv = engine["model.layers.0.self_attn.qkv_proj.weight"]
            self.assertEqual(tensors["model.layers.0.self_attn.v_proj.weight"].data_ptr(),
                             qkv[6:].data_ptr())  # a view into the engine's parameter

    def moe_model(self, experts=4, intermediate=6, hidden=4):
        torch.manual_seed(2)
        full = {"model.layers.0.mlp.gate.weight": torch.randn(experts, hidden),
                "model.layers.0.mlp.shared_experts.gate_proj.weight":
                    torch.randn(intermediate, hidden),
                "model.layers.0.mlp.shared_experts.up_proj.weight":
                    torch.randn(intermediate, hidden),
                "model.layers.0.mlp.shared_experts.down_proj.weight":
                    torch.randn(hidden, intermediate)}
        for e in range(experts):
            p = f"model.layers.0.mlp.experts.{e}."
            full[p + "gate_proj.weight"] = torch.randn(intermediate, hidden)
            full[p + "up_proj.weight"] = torch.randn(intermediate, hidden)
            full[p + "down_proj.weight"] = torch.randn(hidden, intermediate)
        return full

    def test_vllm_stacked_experts_under_tp_and_ep_are_views_of_w13_and_w2(self):
        full = self.moe_model()
        shapes = {name: tuple(t.shape) for name, t in full.items()}
        for expert_parallel in (False, True):
            for rank in range(2):
                ep_rank = rank if expert_parallel else None
                engine = conventions.fuse_like_vllm(full, rank, 2, ep_rank=ep_rank, ep_size=2)
                w13 = engine["model.layers.0.mlp.experts.w13_weight"]
                w2 = engine["model.layers.0.mlp.experts.w2_weight"]
                # Shared experts are fused as a dense MLP is: gate rows, then up rows.
                self.assertEqual(
                    tuple(engine["model.layers.0.mlp.shared_experts.gate_up_proj.weight"].shape),
                    (6, 4))
                # TP: every expert, intermediate halved; EP: half the experts, whole.
                self.assertEqual(tuple(w13.shape), (2, 12, 4) if expert_parallel else (4, 6, 4))
                self.assertEqual(tuple(w2.shape), (2, 4, 6) if expert_parallel else (4, 4, 3))
                tensors, boxes = conventions.vllm_views(engine, shapes, rank, 2, ep_rank=ep_rank)
                held = [n for n in tensors if ".experts." in n]
                self.assertEqual(len(held), 6 if expert_parallel else 12)
                for name, view in tensors.items():
                    self.assertTrue(torch.equal(view, full[name][boxes[name].slices()]), name)
                    if ".experts." in name:
                        base = w2 if "down_proj" in name else w13
                        self.assertEqual(view.untyped_storage().data_ptr()
                                         if hasattr(view, "untyped_storage")
                                         else view.storage().data_ptr(),
                                         base.storage().data_ptr())

    def test_vllm_pads_the_vocabulary_and_refit_writes_only_its_real_rows(self):
        # A vocabulary of 100 pads to 128: 32 rows per rank over TP 4, the last rank holding
        # rows 96..100 and 28 of padding; over TP 8 (16 rows each) rank 7 holds only padding.
        full = self.full_model()
        full["model.embed_tokens.weight"] = torch.randn(100, 8)
        full["lm_head.weight"] = torch.randn(100, 8)
        shapes = {name: tuple(t.shape) for name, t in full.items()}
        for tp, rank, rows, real in ((4, 3, 32, 4), (4, 0, 32, 32), (8, 7, 16, 0)):
            box, padded_rows = conventions.vllm_vocab_box("lm_head.weight", (100, 8), rank, tp)
            self.assertEqual((padded_rows, box.extent[0]), (rows, real), (tp, rank))
        for tp_rank in range(4):
            engine = conventions.fuse_like_vllm(full, tp_rank, 4, kv_heads=None)
            head = engine["lm_head.weight"]
            self.assertEqual(tuple(head.shape), (32, 8))
            # What refit writes through the views: only the real rows.
            tensors, boxes = conventions.vllm_views(engine, shapes, tp_rank, 4)
            box = boxes["lm_head.weight"]
            self.assertEqual(box.offset[0], 32 * tp_rank)
            self.assertEqual(tensors["lm_head.weight"].data_ptr(), head.data_ptr())
            self.assertTrue(torch.equal(tensors["lm_head.weight"], full["lm_head.weight"][box.slices()]))
            self.assertTrue(torch.equal(head[box.extent[0]:], torch.zeros(32 - box.extent[0], 8)))
        unpadded = conventions.fuse_like_vllm(full, 0, 4)
        unpadded["lm_head.weight"] = unpadded["lm_head.weight"][:25]
        with self.assertRaisesRegex(ValueError, "pads the vocabulary of 100 to 32 rows per rank"):
            conventions.vllm_views(unpadded, shapes, 0, 4)

    def test_vllm_replicates_kv_heads_past_the_tp_size_and_fuses_biases(self):
        # 2 KV heads of 2 rows over TP 4: ranks 0 and 1 hold head 0, ranks 2 and 3 head 1.
        full = self.full_model()
        for part, rows in (("q", 8), ("k", 4), ("v", 4)):
            full[f"model.layers.0.self_attn.{part}_proj.bias"] = torch.randn(rows)
        shapes = {name: tuple(t.shape) for name, t in full.items()}
        with self.assertRaisesRegex(ValueError, "give kv_heads="):
            conventions.vllm_views(conventions.fuse_like_vllm(full, 0, 8), shapes, 0, 8)
        for tp_rank in range(4):
            engine = conventions.fuse_like_vllm(full, tp_rank, 4, kv_heads=2)
            qkv = engine["model.layers.0.self_attn.qkv_proj.weight"]
            self.assertEqual(tuple(qkv.shape), (2 + 2 + 2, 8))  # 2 q rows, one k and v head
            self.assertEqual(tuple(engine["model.layers.0.self_attn.qkv_proj.bias"].shape), (6,))
            tensors, boxes = conventions.vllm_views(engine, shapes, tp_rank, 4, kv_heads=2)
            k = boxes["model.layers.0.self_attn.k_proj.weight"]
            self.assertEqual((k.offset[0], k.extent[0]), (2 * (tp_rank // 2), 2))
            for name, view in tensors.items():
                self.assertTrue(torch.equal(view, full[name][boxes[name].slices()]), name)
            bias = tensors["model.layers.0.self_attn.v_proj.bias"]
            self.assertEqual(bias.data_ptr(),
                             engine["model.layers.0.self_attn.qkv_proj.bias"][4:].data_ptr())
        with self.assertRaisesRegex(ValueError, "not a multiple of its 3 KV heads"):
            full3 = dict(full)
            full3["model.layers.0.self_attn.k_proj.weight"] = torch.randn(6, 8)
            full3["model.layers.0.self_attn.v_proj.weight"] = torch.randn(6, 8)
            shapes3 = {name: tuple(t.shape) for name, t in full3.items()}
            engine = {"model.layers.0.self_attn.qkv_proj.weight": torch.zeros(4, 8)}
            conventions.vllm_views(engine, shapes3, 0, 4, kv_heads=3)

    def test_deepseek_mla_latent_projections_fuse_whole_on_every_rank(self):
        torch.manual_seed(3)
        p = "model.layers.0.self_attn."
        full = {p + "q_a_proj.weight": torch.randn(6, 8),
                p + "kv_a_proj_with_mqa.weight": torch.randn(5, 8),
                p + "q_a_layernorm.weight": torch.randn(6),
                p + "q_b_proj.weight": torch.randn(12, 6),
                p + "kv_b_proj.weight": torch.randn(16, 4),
                p + "o_proj.weight": torch.randn(8, 12)}
        shapes = {name: tuple(t.shape) for name, t in full.items()}
        for tp_rank in range(2):
            engine = conventions.fuse_like_vllm(full, tp_rank, 2)
            fused = engine[p + "fused_qkv_a_proj.weight"]
            self.assertEqual(tuple(fused.shape), (11, 8))  # whole, on both ranks
            self.assertEqual(tuple(engine[p + "q_b_proj.weight"].shape), (6, 6))
            tensors, boxes = conventions.vllm_views(engine, shapes, tp_rank, 2)
            self.assertEqual(set(tensors), set(full))
            self.assertEqual(boxes[p + "kv_a_proj_with_mqa.weight"].extent, (5, 8))
            self.assertEqual(tensors[p + "kv_a_proj_with_mqa.weight"].data_ptr(),
                             fused[6:].data_ptr())
            for name, view in tensors.items():
                self.assertTrue(torch.equal(view, full[name][boxes[name].slices()]), name)

    def test_unsupported_vllm_shapes_are_refused(self):
        full = self.full_model()
        shapes = {name: tuple(t.shape) for name, t in full.items()}
        engine = conventions.fuse_like_vllm(full, 0, 2)
        with self.assertRaisesRegex(ValueError, "do not split evenly over TP 8"):
            del engine["lm_head.weight"], engine["model.embed_tokens.weight"]
            conventions.vllm_views(engine, shapes, 0, 8)


if __name__ == "__main__":
    unittest.main()
