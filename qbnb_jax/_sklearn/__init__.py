"""The scikit-learn layer: estimators (`estimator`), bagging and depth selection
(`ensemble`), and tree export, plotting and files (`export`)."""
