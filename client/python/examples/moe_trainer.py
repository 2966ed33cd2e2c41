"""The trainer side of the example: one process holding trainer ranks 0 and 1 of the MoE
model, registered in place (each rank's tensors are views of the model's parameters, which
refitd reads where they are). Each step: an optimizer step, publish, refit. With
--allocated, refit's own memory instead, the new weights copied in before publishing. The
full weights of each version are saved so the inference side can check them.

    moe_trainer.py --socket S --coordinator HOST:PORT --out DIR [--steps N] [--device cuda:0]
"""
import os
import threading

import torch

import refit
from handoff import wait_for_file
from moe import MoEModel, example_arguments, register, trainer_placement


def main():
    parser = example_arguments(__doc__)
    parser.add_argument("--coordinator", required=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = MoEModel().to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with refit.LocalDaemon(args.socket) as daemon, refit.RefitClient(args.coordinator) as client:
        ranks = [register(daemon, "source", r, dict(model.named_parameters()),
                          trainer_placement(r, args.ranks), args.allocated)
                 for r in range(args.ranks)]
        for version in range(args.first_version, args.first_version + args.steps):
            tokens = torch.randint(0, 64, (16,), device=args.device)
            loss = torch.nn.functional.cross_entropy(model(tokens), torch.roll(tokens, 1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            # The inference side must be done reading the previous version.
            if version > args.first_version:
                wait_for_file(os.path.join(args.out, f"checked-{version - 1}"), 60)
            with torch.no_grad():
                full = {name: t.detach().cpu().clone() for name, t in model.state_dict().items()}
                if args.allocated:
                    for rank in ranks:
                        rank.load(full)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()  # refitd reads the memory from its own context
            torch.save(full, os.path.join(args.out, f"weights-{version}.pt"))
            # A watcher sees the epoch through to its commit, as a dashboard or an
            # orchestrator's progress bar would.
            seen = []
            # Named by version: a watch that opens after the epoch ended still hears it.
            watcher = threading.Thread(
                target=lambda: seen.extend(client.watch(timeout=60, version=version)))
            watcher.start()
            daemon.publish(version)
            report = client.refit(version, timeout=60)
            watcher.join(timeout=60)
            if not seen or not (seen[-1].finished and seen[-1].committed) or \
                    seen[-1].epoch_id != report.epoch_id or \
                    seen[-1].bytes_done != seen[-1].bytes_total:
                raise SystemExit(f"version {version}: the watch saw {seen[-1:]} of epoch "
                                 f"{report.epoch_id}")
            print(f"version {version}: loss {loss.item():.4f}, {report.bytes} bytes in "
                  f"{report.seconds:.3f} s, epoch {report.epoch_id}", flush=True)


if __name__ == "__main__":
    main()
