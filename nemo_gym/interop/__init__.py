"""Other libraries' agents, tools and environments as nemo_gym objects.

One module per library, each behind its own extra and imported only when used:

- `nemo_gym.interop.langgraph` (extra `langgraph`): `ChatNemoGym`, our model as a
  LangChain chat model; `LangGraphAgent`, a user's LangGraph graph as a harness.
- `nemo_gym.interop.mcp` (extra `mcp`, the official SDK): `serve`, any environment's
  tools over MCP (stdio, streamable HTTP); `MCPServer` / `MCPEnv`, an MCP server's
  tools inside an environment.
- `nemo_gym.interop.openenv` (extra `openenv`): `OpenEnv`, an OpenEnv environment in
  process or through its client.
- `nemo_gym.interop.verifiers` (extra `verifiers`): `VerifiersEnv`, a `verifiers`
  environment's dataset, tools and rubric.
- `nemo_gym.interop.harbor` (no extra): `HarborEnv`, Harbor task directories.
- `nemo_gym.interop.nemo_gym` (no extra): NeMo Gym's task rows as environments
  (`load`, `SERVERS`) and our rollouts as its result rows (`to_rows`).

The LangGraph harness patterns (reflection, orchestrator with sub-agents, parallel
thinking, ReWOO) are in `nemo_gym.harnesses.langgraph`.
"""
