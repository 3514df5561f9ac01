"""The Docker-free local stack and the ``opslake`` CLI (never deployed).

A moto server provisioned from template.yaml, the handlers invoked in-process, a local API
Gateway and a local SQS event source mapping.
"""

from opslake_local.drain import BackgroundDrainer, Drainer, DrainResult, drain_once
from opslake_local.http import LocalApi
from opslake_local.invoke import FunctionError, Invoker, LambdaContext
from opslake_local.stack import ApiKey, LocalStack
from opslake_local.template import Template, TemplateError, find_template

__all__ = [
    "ApiKey",
    "BackgroundDrainer",
    "DrainResult",
    "Drainer",
    "FunctionError",
    "Invoker",
    "LambdaContext",
    "LocalApi",
    "LocalStack",
    "Template",
    "TemplateError",
    "drain_once",
    "find_template",
]
