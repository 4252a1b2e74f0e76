"""Trainer integrations, each importing its framework only when used.

- `nemo_gym.integrations.trl`: datasets, reward functions, a rollout function and an
  environment factory for TRL's `GRPOTrainer` (also Unsloth's GRPO);
- `nemo_gym.integrations.verl`: a verl agent loop (`nemo_gym`) over verl's servers;
- `nemo_gym.integrations.nemo_rl`: a NeMo RL environment;
- `nemo_gym.integrations.bridge`: the long-lived event loop they share.

Token-exact training batches for your own loop are `nemo_gym.training`.
"""
