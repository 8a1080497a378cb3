// Command crcheck validates Prometheus Operator resources (ServiceMonitor, PodMonitor,
// PrometheusRule) against the operator's own Go API types, which its CRD schemas are generated
// from: an unknown field or a value of the wrong type is an error, as with the API server's
// strict field validation. kubernetes-validate, which checks the built-in kinds, has no schema
// for custom resources.
//
//	crcheck FILE...   (multi-document YAML; documents of other API groups are ignored)
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func check(doc []byte) (string, error) {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return "", err
	}
	var obj any
	switch meta.APIVersion + "/" + meta.Kind {
	case "monitoring.coreos.com/v1/ServiceMonitor":
		obj = &monitoringv1.ServiceMonitor{}
	case "monitoring.coreos.com/v1/PodMonitor":
		obj = &monitoringv1.PodMonitor{}
	case "monitoring.coreos.com/v1/PrometheusRule":
		obj = &monitoringv1.PrometheusRule{}
	default:
		if meta.APIVersion == "monitoring.coreos.com/v1" {
			return "", fmt.Errorf("unsupported kind %s", meta.Kind)
		}
		return "", nil
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return "", fmt.Errorf("%s: %w", meta.Kind, err)
	}
	return meta.Kind, nil
}

func main() {
	failed := false
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for i := 0; ; i++ {
			doc, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
				os.Exit(2)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			kind, err := check(doc)
			switch {
			case err != nil:
				fmt.Printf("%s: document %d: INVALID %v\n", path, i, err)
				failed = true
			case kind != "":
				fmt.Printf("%s: document %d: valid %s\n", path, i, kind)
			}
		}
		f.Close()
	}
	if failed {
		os.Exit(1)
	}
}
