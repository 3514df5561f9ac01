"""LangGraph's prebuilt ReAct agent, traced by openinference-instrumentation-langchain."""

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
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import ToolNode, create_react_agent
from openinference.instrumentation.langchain import LangChainInstrumentor

provider = tracer_provider("langgraph-recording")
LangChainInstrumentor().instrument(tracer_provider=provider)
model = ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key=API_KEY)
# the tool's error goes back to the model as a message (LangGraph's default re-raises it)
tools = ToolNode([tool(lookup_order), tool(cancel_order)], handle_tool_errors=True)
agent = create_react_agent(model, tools, name=AGENT_NAME)
print(agent.invoke({"messages": [("user", QUESTION)]})["messages"][-1].content)
provider.shutdown()
