"""A Strands Agents agent with its built-in OpenTelemetry (StrandsTelemetry), through its OpenAI model."""

from _common import (
    AGENT_NAME,
    API_KEY,
    BASE_URL,
    MODEL,
    QUESTION,
    cancel_order,
    lookup_order,
    tracer_provider,
)
from opentelemetry import trace
from strands import Agent, tool
from strands.models.openai import OpenAIModel

provider = tracer_provider("strands-recording")
trace.set_tracer_provider(provider)  # Strands traces through the global provider
model = OpenAIModel(client_args={"base_url": BASE_URL, "api_key": API_KEY}, model_id=MODEL)
agent = Agent(
    name=AGENT_NAME, model=model, tools=[tool(lookup_order), tool(cancel_order)], callback_handler=None
)
print(agent(QUESTION))
provider.shutdown()
