"""A Pydantic AI agent with its built-in OpenTelemetry (``agent.instrument``; no Logfire), on an SDK
tracer provider. A tool that raises ends the run (Pydantic AI's way: ``ModelRetry`` is the error
the model sees), so the run fails after the failed call."""

import _common as c
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

provider = c.tracer_provider("pydantic-ai-recording")
model = OpenAIChatModel(c.MODEL, provider=OpenAIProvider(base_url=c.BASE_URL, api_key=c.API_KEY))
agent = Agent(model, name=c.AGENT_NAME)
agent.instrument = InstrumentationSettings(
    tracer_provider=provider
)  # (pydantic-ai 2: no longer an Agent() argument)
agent.tool_plain(c.lookup_order)
agent.tool_plain(c.cancel_order)
try:
    print(agent.run_sync(c.QUESTION).output)
except Exception as exc:  # the failed tool ends the run: recorded as the framework reports it
    print(f"the run failed: {type(exc).__name__}: {exc}")
provider.shutdown()
