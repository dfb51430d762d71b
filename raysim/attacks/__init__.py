"""Attacks on what an honest-but-curious server receives: the privacy claims of the seeds' papers, measured.

A recorded run's configuration is replayed in this process (:mod:`.capture`) and the typed messages the server
received from chosen clients in a chosen round are attacked:

- :mod:`.inverting`: Inverting Gradients (Geiping et al., NeurIPS 2020) against one client's update of one local
  step, with iDLG's label recovery (:mod:`.labels`; Zhao et al. 2020) and the gradient read off the update
  (:mod:`.observed`);
- :mod:`.analytic`: APRIL's closed form (Lu et al., CVPR 2022), the input solved from the patch and position
  embeddings' gradients of a one-row full fine-tuning update;
- :mod:`.membership`: the loss-threshold membership inference (Yeom et al., CSF 2018) against the global model.

Reconstructions are scored with scikit-image's PSNR and SSIM (:mod:`.scores`), membership with scikit-learn's ROC;
every attack is an MLflow run of its own, nested under the attacked run (:mod:`.attack_run`); :mod:`.harness` puts
the pieces together and ``raysim attack`` is :mod:`.cli`.

Layer: above the engine, the tracking and the models (it replays runs and builds the attacker's model), below the
CLI; importing this package imports nothing (``raysim --help`` stays free of torch).
"""
