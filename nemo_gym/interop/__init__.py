"""Other libraries' agents, tools and environments as nemo_gym objects.

One module per library, each behind its own extra and imported only when used:

| module | library | extra | what |
|---|---|---|---|
| `nemo_gym.interop.langgraph` | LangChain / LangGraph | `langgraph` | `ChatNemoGym` (our model as a LangChain chat model), `LangGraphAgent` (a user's graph as a harness) |
| `nemo_gym.interop.mcp` | the official `mcp` SDK | `mcp` | `serve` (any environment's tools over MCP), `MCPTools` / `MCPEnv` (an MCP server's tools in an environment) |
| `nemo_gym.interop.openenv` | `openenv-core` | `openenv` | `OpenEnv` (an OpenEnv environment, in process or over its client) |
| `nemo_gym.interop.verifiers` | `verifiers` | `verifiers` | `VerifiersEnv` (a verifiers environment's dataset, tools and rubric) |
| `nemo_gym.interop.harbor` | none (the layout) | none | `HarborEnv` (Harbor task directories) |

The LangGraph harness patterns (reflection, orchestrator, parallel thinking, ReWOO)
are in `nemo_gym.harnesses.langgraph`.
"""
