"""Attacks on what an honest-but-curious server receives: the privacy claims of the seeds' papers, measured.

A recorded run's configuration (:mod:`.recorded`) is replayed in this process (:mod:`.capture`) and the typed
messages the server received from chosen clients in a chosen round are attacked:

- :mod:`.inverting`: Inverting Gradients (Geiping et al., NeurIPS 2020) against one client's update of one local
  step, and through the simulated local training (:mod:`.local_epoch`) of several; iDLG's label recovery
  (:mod:`.labels`; Zhao et al. 2020) and the gradient or update read off the message (:mod:`.observed`);
- :mod:`.analytic`: APRIL's closed form (Lu et al., CVPR 2022), the input solved from the patch and position
  embeddings' gradients of a one-row full fine-tuning update;
- split learning (FedV, FedVZ, FESTA; :mod:`.split_learning`): the inputs inverted from the cut-layer features the
  server receives, by optimisation through the attacker's prior of the client head (:mod:`.smashed`) or by a learned
  inverse network (:mod:`.inverse_network`), and the labels read off the gradients the client's tail returns
  (:mod:`.label_leakage`);
- FedGCR's feature means: the client's type and classes read off the nearest public rows (:mod:`.feature_means`),
  and the image whose feature is the mean it sent (:mod:`.prototype`);
- membership inference against the global or the personalised models: the loss threshold (:mod:`.membership`;
  Yeom et al., CSF 2018) and offline LiRA (:mod:`.lira`; Carlini et al., S&P 2022) with shadow runs replayed by
  raysim (:mod:`.shadows`), put together in :mod:`.membership_attack`.

Reconstructions are scored with scikit-image's PSNR and SSIM (:mod:`.scores`), membership with scikit-learn's ROC;
every attack is an MLflow run of its own, nested under the attacked run (:mod:`.attack_run`), with its pictures
(:mod:`.figures`); :mod:`.harness` puts the pieces together, and ``raysim attack`` is :mod:`.cli` (with
:mod:`.split_cli`, :mod:`.features_cli`, :mod:`.membership_cli` and :mod:`.cli_options`).

Layer: above the engine, the tracking and the models (it replays runs and builds the attacker's model), below the
CLI; importing this package imports nothing (``raysim --help`` stays free of torch).
"""
