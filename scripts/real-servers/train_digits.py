#!/usr/bin/env python3
"""Train the `digits` scikit-learn classifier and write an MLServer model repository.

Data: sklearn's built-in 8x8 digits set (load_digits ships inside scikit-learn; no download).
Model: LogisticRegression on the 64 raw pixel values (0..16), saved with joblib.

Writes DIR/settings.json (server) and DIR/digits/{model.joblib,model-settings.json}, matching
the server behind /work/shared/reference/transcripts/v2-*.txt: model `digits`, version `v1`,
platform `sklearn`, input `input-0` FP32 [-1, 64], outputs `predict` INT64 [-1, 1] and
`predict_proba` FP64 [-1, 10].

Usage: train_digits.py DIR [--http-port 18081] [--grpc-port 18091] [--metrics-port 18092] [--host 127.0.0.1]
"""
import argparse
import json
import os

import joblib
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--http-port", type=int, default=18081)
    ap.add_argument("--grpc-port", type=int, default=18091)
    ap.add_argument("--metrics-port", type=int, default=18092)
    args = ap.parse_args()

    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    clf = LogisticRegression(max_iter=5000)
    clf.fit(X_train, y_train)
    acc = clf.score(X_test, y_test)
    clf.fit(X, y)  # serve the model trained on everything

    model_dir = os.path.join(args.dir, "digits")
    os.makedirs(model_dir, exist_ok=True)
    joblib.dump(clf, os.path.join(model_dir, "model.joblib"))

    settings = {
        "debug": True,  # 500s carry a plain-text traceback, as in v2-infer-bad-shape.txt
        "host": args.host,
        "http_port": args.http_port,
        "grpc_port": args.grpc_port,
        "metrics_port": args.metrics_port,
        "load_models_at_startup": True,
        "parallel_workers": 0,  # in-process, as in the transcripts; also avoids a uvloop>=0.22 crash in worker processes
    }
    model_settings = {
        "name": "digits",
        "implementation": "mlserver_sklearn.SKLearnModel",
        "platform": "sklearn",
        "versions": ["v1"],
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [
            {"name": "predict", "datatype": "INT64", "shape": [-1, 1]},
            {"name": "predict_proba", "datatype": "FP64", "shape": [-1, 10]},
        ],
        "parameters": {"uri": "./model.joblib", "version": "v1"},
    }
    with open(os.path.join(args.dir, "settings.json"), "w") as f:
        json.dump(settings, f, indent=2)
    with open(os.path.join(model_dir, "model-settings.json"), "w") as f:
        json.dump(model_settings, f, indent=2)
    print(f"digits: held-out accuracy {acc:.3f}; repository {args.dir}")


if __name__ == "__main__":
    main()
