package workflow

import yaml "go.yaml.in/yaml/v3"

type yamlNode = yaml.Node

const yamlScalar = yaml.ScalarNode
