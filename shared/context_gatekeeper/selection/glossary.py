"""Chinese technical terms and the English words engineers use for them.

Chinese engineers write "加了索引" in one message and "partial index" in the next;
"Docker 镜像" and then "base image".  Without a bridge, the two share no anchor and
the second message looks like a new topic.  Each term below, found in Chinese text,
also yields the anchors of its English words (stemmed like any English word), so
"索引" meets "index" and "镜像" meets "image".

The list is deliberately small and technical: multi-character terms whose English
counterpart is what people actually type in mixed-language chat.  Single characters
("锁", "表") are left out, and so are words with an everyday sense too: "训练" is
model training and marathon training, "分区" a Kafka partition and a bathroom's wet
zone, "内存" a server's memory and a phone's, "容器" a Docker container and a food
box, "事务" a transaction and an errand.  Bridging those would carry the ambiguity
into both languages.
"""

from __future__ import annotations

__all__ = ["TERMS"]

TERMS: dict[str, str] = {
    # storage and databases
    "索引": "index", "数据库": "database", "慢查询": "slow query", "执行计划": "query plan",
    "主键": "primary key", "外键": "foreign key", "分片": "shard", "缓存": "cache", "缓存雪崩": "cache avalanche",
    "分布式锁": "distributed lock", "死锁": "deadlock", "乐观锁": "optimistic lock", "悲观锁": "pessimistic lock",
    # concurrency and runtime
    "线程": "thread", "线程池": "thread pool", "连接池": "connection pool",
    "协程": "coroutine", "事件循环": "event loop", "并发": "concurrency", "异步": "async", "回调": "callback",
    "垃圾回收": "garbage collection gc", "内存泄漏": "memory leak", "显存": "gpu memory", "死循环": "infinite loop",
    # messaging and distributed systems
    "消息队列": "message queue", "消费者": "consumer", "生产者": "producer", "消费组": "consumer group",
    "集群": "cluster", "主从切换": "failover", "脑裂": "split brain", "限流": "rate limit",
    "熔断": "circuit breaker", "负载均衡": "load balancer", "反向代理": "reverse proxy", "网关": "gateway",
    "序列化": "serialization", "幂等": "idempotent", "吞吐": "throughput",
    # deployment and operations
    "镜像": "image", "服务器": "server", "客户端": "client", "端口": "port",
    "防火墙": "firewall", "令牌": "token", "密钥": "key", "加密": "encryption",
    "内核": "kernel", "环境变量": "environment variable", "告警": "alert",
    # code and tooling
    "编译": "compile", "单元测试": "unit test", "断言": "assert", "变基": "rebase",
    "配置文件": "config file", "正则表达式": "regex", "哈希": "hash", "递归": "recursion",
    # machine learning
    "梯度": "gradient", "学习率": "learning rate", "批大小": "batch size", "过拟合": "overfitting",
    "正则化": "regularization", "微调": "finetune", "权重衰减": "weight decay", "数据集": "dataset",
}
"""Chinese term -> the English words it stands for (space-separated)."""
