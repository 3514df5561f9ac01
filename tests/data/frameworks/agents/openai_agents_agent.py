"""An OpenAI Agents SDK agent (chat completions model), traced by
openinference-instrumentation-openai-agents (its processor replaces the SDK's own exporter)."""

import _common as c
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

provider = c.tracer_provider("openai-agents-recording")
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)  # exclusive: nothing to OpenAI's platform
model = OpenAIChatCompletionsModel(
    model=c.MODEL, openai_client=AsyncOpenAI(base_url=c.BASE_URL, api_key=c.API_KEY)
)
# the SDK's default tool error handler: the failure goes back to the model as a message
agent = Agent(
    name=c.AGENT_NAME, model=model, tools=[function_tool(c.lookup_order), function_tool(c.cancel_order)]
)
print(Runner.run_sync(agent, c.QUESTION).final_output)
provider.shutdown()
