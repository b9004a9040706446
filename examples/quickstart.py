"""The seed blog posts' examples on tapejax (TF1 graph code ported to TF2 eager).

Run:  python examples/quickstart.py
Each block prints what the post printed with TensorFlow.
"""
import numpy as np

import tapejax as tf

print("== seed 000: output_gradients is the cotangent (a multiplier on the gradient)")
w = [tf.Variable([0.0, 0.1]), tf.Variable([0.0, 0.2])]
x = 2.0
with tf.GradientTape(persistent=True) as tape:
    y = x * (w[0] + w[1])
tf.print(y)                                          # [0 0.6]
tf.print(tape.gradient(y, w))                        # [[2 2], [2 2]]
w = [tf.Variable([0.0, 0.1]), tf.Variable([0.0, 0.2])]
with tf.GradientTape(persistent=True) as tape:
    y = tf.reduce_mean(x * (w[0] + w[1]))
    y2 = 7.0 * y
tf.print(tape.gradient(y2, w))                       # [[7 7], [7 7]]
tf.print(tape.gradient(y, w, output_gradients=tape.gradient(y2, y)))  # manual chain rule: [[7 7], [7 7]]
tf.print(tape.gradient(y2, w, output_gradients=-1.0))                 # flipped: [[-7 -7], [-7 -7]]

print("== seed 001: a list target gives the SUM of gradients (use tape.jacobian for a Jacobian)")
x = tf.constant(3.0)
with tf.GradientTape() as g:
    g.watch(x)
    y = x * x
tf.print(g.gradient(y, x))                           # 6
inputs = tf.convert_to_tensor([[0.1, 0], [0.5, 0.51]])
w = tf.Variable(initial_value=inputs)
b = tf.Variable(tf.zeros((2,)))
labels = tf.convert_to_tensor([0, 1])


def forward(inputs, labels, var_list):
    w, b = var_list
    logits = tf.matmul(inputs, w) + b
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


with tf.GradientTape() as g:
    xentropy = forward(inputs, labels, [w, b])
grads = g.gradient(xentropy, [w, b])
print(xentropy.numpy())                              # [0.6881597  0.71584916]
print(grads[0].numpy())                              # [[ 0.20586157 -0.20586154] [ 0.2607238 -0.26072377]]
with tf.GradientTape() as g:
    reduced_xentropy = tf.reduce_mean(forward(inputs, labels, [w, b]))
grads_reduced = g.gradient(reduced_xentropy, [w, b])
print(reduced_xentropy.numpy())                      # 0.70200443
print(grads_reduced[0].numpy())                      # half of the summed gradient

print("== seed 002: higher-order derivatives of pow(a, 2) by nested tapes")
a = tf.constant(1.0)
with tf.GradientTape() as t3:
    t3.watch(a)
    with tf.GradientTape() as t2:
        t2.watch(a)
        with tf.GradientTape() as t1:
            t1.watch(a)
            b = tf.pow(a, 2)
        grad = t1.gradient(b, a)
    grad_2 = t2.gradient(grad, a)
grad_3 = t3.gradient(grad_2, a)
tf.print(grad, grad_2, grad_3)                       # 2 2 0

print("== seed 003: linear regression, 500 steps of plain gradient descent")
rng = np.random.default_rng(0)
x_train = rng.uniform(-1, 1, 100).astype(np.float32)
y_train = (3.0 * x_train + 2.0 + rng.normal(0, 0.05, 100)).astype(np.float32)
m = tf.Variable(0.0)
b = tf.Variable(0.0)


def predict_y_value(x):
    return m * x + b


def squared_error(y_pred, y_true):
    return tf.reduce_mean(tf.square(y_pred - y_true))


learning_rate = 0.05
for i in range(500):
    with tf.GradientTape() as tape:
        predictions = predict_y_value(x_train)
        loss = squared_error(predictions, y_train)
    gradients = tape.gradient(loss, [m, b])
    m.assign_sub(gradients[0] * learning_rate)
    b.assign_sub(gradients[1] * learning_rate)
print("m: %f, b: %f" % (m.numpy(), b.numpy()))      # close to m: 3, b: 2
print("compiled replays:", tf.cache_info())

print("== why is my gradient None?")
x = tf.constant(3.0)
with tf.GradientTape(persistent=True) as tape:
    y = x * x                                       # x was never watched
print(tape.gradient(y, x))                          # None
print(tape.explain(y, x))
