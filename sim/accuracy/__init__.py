"""How far to trust a step-time prediction: an error band from the validation residuals of
comparable published runs (:mod:`sim.accuracy.band`), their table (:mod:`sim.accuracy.residuals`),
the features that make runs comparable (:mod:`sim.accuracy.job_class`) and the band's
leave-one-source-out coverage (:mod:`sim.accuracy.coverage`)."""
