"""Transform a SAM template into the CloudFormation template that a deploy creates.

Usage: python3 samtransform.py TEMPLATE [--region R] [--bucket B] [--param Key=Value ...]

This is what `sam package` followed by `sam deploy` does to a template, minus
the upload: every local artifact path (a function's CodeUri, a layer's
ContentUri, an API's DefinitionUri) becomes an S3 location, as `sam package`
writes it, and then AWS's SAM translator (the samtranslator library behind the
AWS::Serverless-2016-10-31 transform and `sam validate`) expands the
AWS::Serverless resources. Managed policy names resolve from the map bundled
with samtranslator, so no AWS call is made. The CloudFormation template is
printed as JSON on standard output; a template the translator refuses prints
its errors on standard error and exits with status 1. A missing samtranslator
exits with status 3.

Package samtemplate (template.go) embeds this file and runs it; the Go tests
lint its output with cfn-lint.
"""

import argparse
import json
import sys

try:
    import boto3
    from samtranslator.model.exceptions import InvalidDocumentException
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator
    from samtranslator.yaml_helper import yaml_parse
    from samtranslator.internal.managed_policies import get_bundled_managed_policy_map
except ImportError as err:  # pragma: no cover - the Go side names the fix
    print(f"samtransform: {err}", file=sys.stderr)
    sys.exit(3)

# Resource type -> the properties that `sam package` uploads when they are a
# local path (a string that is not already an s3:// URI).
ARTIFACT_PROPERTIES = {
    "AWS::Serverless::Function": ["CodeUri"],
    "AWS::Serverless::LayerVersion": ["ContentUri"],
    "AWS::Serverless::Api": ["DefinitionUri"],
    "AWS::Serverless::HttpApi": ["DefinitionUri"],
    "AWS::Serverless::StateMachine": ["DefinitionUri"],
}

# Globals sections whose artifact property applies to every resource of a type.
GLOBALS_SECTIONS = {
    "Function": "AWS::Serverless::Function",
    "Api": "AWS::Serverless::Api",
    "HttpApi": "AWS::Serverless::HttpApi",
}


def is_local(value):
    return isinstance(value, str) and not value.startswith("s3://")


def package(template, bucket, prefix):
    """Replace local artifact paths by S3 locations, in place."""
    globals_ = template.get("Globals") or {}
    inherited = {}
    for section, resource_type in GLOBALS_SECTIONS.items():
        body = globals_.get(section) or {}
        for prop in ARTIFACT_PROPERTIES[resource_type]:
            if is_local(body.get(prop)):
                inherited[(resource_type, prop)] = body.pop(prop)
    for logical_id, resource in sorted((template.get("Resources") or {}).items()):
        if not isinstance(resource, dict):
            continue
        resource_type = resource.get("Type")
        for prop in ARTIFACT_PROPERTIES.get(resource_type, []):
            props = resource.setdefault("Properties", {})
            value = props.get(prop, inherited.get((resource_type, prop)))
            if is_local(value):
                # sam package names each artifact by the hash of its content;
                # a stable name per resource is enough for a translation.
                props[prop] = {"Bucket": bucket, "Key": f"{prefix}/{logical_id}.zip"}


class BundledPolicies:
    """A managed-policy loader that reads samtranslator's bundled map."""

    def __init__(self, partition):
        self.partition = partition

    def load(self):
        return get_bundled_managed_policy_map(self.partition) or {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--bucket", default="ichido-artifacts-123456789012")
    parser.add_argument("--prefix", default="ichido")
    parser.add_argument("--param", action="append", default=[], metavar="Key=Value")
    args = parser.parse_args()

    params = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--param {item!r}: want Key=Value")
        params[key] = value

    with open(args.template, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    if not isinstance(template, dict):
        print("samtransform: the template is not a mapping", file=sys.stderr)
        return 1
    package(template, args.bucket, args.prefix)

    session = boto3.session.Session(region_name=args.region)
    policies = BundledPolicies(session.get_partition_for_region(args.region))
    translator = Translator(None, Parser(), boto_session=session)
    try:
        out = translator.translate(
            template,
            parameter_values=params,
            get_managed_policy_map=policies.load,
        )
    except InvalidDocumentException as err:
        for cause in err.causes:
            print(f"samtransform: {cause.message}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
